"""Many fresh threads that spend their time in malloc (compiling source) while CPU samples with
native frames arrive: a thread's first unwind must not happen inside the signal handler, where
libunwind's lazily allocated TLS would call malloc over an interrupted malloc (a deadlock).
Each thread's first sample is one chance to hit it, so the test catches a regression often, not
always (1 run in 3 when it was found)."""

import sys
import threading

SOURCE = "\n".join(f"def f{i}(a, b):\n    return [a[j] + b * {i} for j in range(len(a))]"
                   for i in range(200))


def work():
    for _ in range(6):
        compile(SOURCE, "<generated>", "exec")


work()  # the main thread too, from its first sample on
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 24):
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print("ok")

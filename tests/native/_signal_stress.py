"""Frame pushes and pops as fast as possible (generators, C-to-Python calls through lru_cache
and __getitem__, threads) while CPU samples arrive: each sample walks the Python frames and
unwinds the native stack inside a SIGPROF handler."""

import functools
import sys
import threading
import time


@functools.lru_cache(maxsize=None)
def cached(n):
    return tuple(x for x in range(n % 7))


class Table:
    def __getitem__(self, i):
        return cached(i) if i % 3 else sum(g(i))


def g(n):
    for i in range(n % 5):
        yield i


def churn(seconds):
    t = Table()
    end = time.process_time() + seconds
    i = 0
    while time.process_time() < end:
        t[i]
        i += 1
        if i % 97 == 0:
            cached.cache_clear()


threads = [threading.Thread(target=churn, args=(float(sys.argv[1]) / 2,)) for _ in range(2)]
for th in threads:
    th.start()
churn(float(sys.argv[1]))
for th in threads:
    th.join()
print("ok")

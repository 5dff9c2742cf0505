"""A program driving the stand-in framework (tests/integration/fixtures): known calls of the
stand-in runtime on known lines. argv[1]: libfakeframework.so."""

import ctypes
import sys
import threading

fw = ctypes.CDLL(sys.argv[1])  # loads the runtime too: both after the profiler started


def step():
    fw.fw_launch(2, 4096)  # STEP_LAUNCH


fw.fw_launch(5, 100)  # LAUNCH
for _ in range(3):
    step()
fw.fw_copy(3, 64)  # COPY
fw.fw_sync()  # SYNC
fw.fw_alloc(1 << 20)  # ALLOC
print("plugin", fw.fw_plugin(4))  # PLUGIN
print("abi", "ok" if fw.fw_check_abi() == 1 else "broken")  # ABI
print("longjmp", fw.fw_longjmp(3))  # LONGJMP


def worker():
    fw.fw_launch(1000, 3)  # THREAD_LAUNCH


threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("c threads", fw.fw_threads(2, 500))  # C_THREADS
sys.exit(7)

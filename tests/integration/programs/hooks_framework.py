"""A program driving the stand-in framework (tests/integration/fixtures): known calls of the
stand-in runtime on known lines. argv[1]: libfakeframework.so."""

import ctypes
import sys

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
sys.exit(7)

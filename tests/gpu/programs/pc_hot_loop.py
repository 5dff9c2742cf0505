"""Runs hot_loop.cu (built by the test with nvcc -lineinfo into the shared library named by
argv[1]) a few times: the PC sampling GPU test's CUDA program."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
err = lib.run_hot_loop(1 << 24, 256, 5)  # CALL
if err:
    sys.exit(f"run_hot_loop failed: CUDA error {err}")
print("pc_hot_loop done")

"""Runs ext/malloc_threads.c's C threads (argv: library path, threads, seconds)."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.run_malloc_threads.argtypes = (ctypes.c_int, ctypes.c_double)
print("threads", lib.run_malloc_threads(int(sys.argv[2]), float(sys.argv[3])))

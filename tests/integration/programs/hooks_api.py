"""Declared hooks from the Python API, on a runtime loaded before the session starts.
argv: libfakeframework.so, hooks file, output."""

import ctypes
import sys

import deepcontext

fw = ctypes.CDLL(sys.argv[1])
accel = ctypes.CDLL("libfakeaccel.so")


def address():  # what dlsym answers for fa_launch (indexing looks it up afresh)
    return ctypes.cast(accel["fa_launch"], ctypes.c_void_p).value


real = address()
fw.fw_launch(4, 10)  # BEFORE (not profiled)
with deepcontext.profile(sys.argv[3], hooks=sys.argv[2]):
    inside = address()
    fw.fw_launch(3, 8)  # INSIDE
print("dlsym gave the stub inside", inside != real)
print("dlsym gives the function after", address() == real)
print("done")

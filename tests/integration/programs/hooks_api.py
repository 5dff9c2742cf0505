"""Declared hooks from the Python API, on a runtime loaded before the session starts.
argv: libfakeframework.so, hooks file, output."""

import ctypes
import sys

import deepcontext

fw = ctypes.CDLL(sys.argv[1])
fw.fw_launch(4, 10)  # BEFORE (not profiled)
with deepcontext.profile(sys.argv[3], hooks=sys.argv[2]):
    fw.fw_launch(3, 8)  # INSIDE
fw.fw_launch(6, 10)  # AFTER (hooks removed)
print("done")

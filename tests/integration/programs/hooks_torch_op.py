"""A PyTorch operator whose implementation calls the stand-in runtime: the hook frame hangs
under the line, the operator and the implementation's line. argv[1]: libfakeframework.so."""

import ctypes
import sys

import torch

fw = ctypes.CDLL(sys.argv[1])
lib = torch.library.Library("fakeaccel", "DEF")
lib.define("launch(Tensor x) -> Tensor")


def launch(x):
    fw.fw_launch(3, 7)  # IMPL
    return x.clone()


lib.impl("launch", launch, "CPU")
x = torch.ones(4)
for _ in range(2):
    y = torch.ops.fakeaccel.launch(x)  # OP
print("ok", float(y.sum()))

"""A function compiled by torch.compile before any session (the usual warm-up), then profiled:
no provenance was recorded when it compiled, so its kernels stay under the line that calls it,
but the generated wrapper's frames are still known for what they are, and the analyzer says why
the kernels have no source lines. Prints "ok".

Usage: compiled_before_session.py OUTPUT
"""

import sys

import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir

import deepcontext
from deepcontext.analysis import analyze
from deepcontext.tree import load, views

CALLS = 5


def f(x, w):
    return (torch.relu(x @ w) * 2 + 1).sum()


x, w = torch.randn(32, 64), torch.randn(64, 64)
compiled = torch.compile(f)
for _ in range(2):
    compiled(x, w)  # compiled here, outside any session
# (no CPU samples: a sample at the fused kernel's call line would make that line a call site the
# profile saw, the count below two; the kernel's OpenMP barrier spins long enough for one on a
# loaded 2-core machine)
with deepcontext.profile(output=sys.argv[1], context="python,op", sample_interval=0, force=True):
    for _ in range(CALLS):
        compiled(x, w)  # CALL
tree = load(sys.argv[1])
wrapper = [n for n in tree.nodes if n.frame.file.startswith(cache_dir())]
assert wrapper and all(n.frame.get("generated") == "inductor" for n in wrapper), wrapper
info = tree.metadata["torch_compile"]
# the matmul, an extern kernel, is the one call the profile saw (no RecordFunction in the fused
# C++ kernel: cpp.enable_kernel_profile was off when it compiled)
assert info["compiles"] == [] and info["kernel_calls"] == info["kernel_calls_without_provenance"] == 1
folded = views.user_frames(tree)
assert not [n for n in folded.nodes if n.frame.file.startswith(cache_dir())]
(mm,) = [n for n in folded.nodes if n.frame.name == "aten::mm"]
# under the compiled region, in f (at its first line: no line table of its own), at the call
line = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# CALL"))
assert [(fr.name, fr.line) for fr in folded.path(mm.id)] == [
    ("<module>", line), ("Torch-Compiled Region: 0/0", 0), ("f", f.__code__.co_firstlineno),
    ("aten::mm", 0)]
assert mm.metrics["op.count"] == CALLS
# the analyzer says why, at the call
(note,) = [f for f in analyze(tree) if f.rule == "compile-provenance"]
assert note.title == "1 of 1 compiled kernel call sites have no source lines", note.title
assert (note.location.file, note.location.line) == (__file__, line), note.location
print("ok")

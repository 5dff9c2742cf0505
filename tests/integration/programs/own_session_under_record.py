"""A program that profiles itself (a ``deepcontext.profile`` block with a schedule, then
``deepcontext.start``/``stop``), run under ``deepcontext record``: record's session covers the
whole run and the program's own sessions defer to it, so the program runs as it would alone.
Prints "done" and exits with status 3."""

import sys

import torch

import deepcontext

x = torch.randn(32, 32)
every_other = deepcontext.schedule(wait=1, active=1)
with deepcontext.profile(output="own.dcprof", schedule=every_other) as prof:
    for _ in range(6):
        x @ x  # MM
        prof.step()
deepcontext.start("own2.dcprof")
x @ x  # MM2
deepcontext.stop()
print("done")
sys.exit(3)

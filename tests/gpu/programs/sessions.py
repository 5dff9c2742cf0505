"""Several deepcontext sessions in one process, then a normal exit (CUPTI subscribed and
unsubscribed each time; buffers may come back from CUPTI's own exit handler).

argv: OUT_PREFIX
"""

import sys

import torch

import deepcontext

SESSIONS = 3
x = torch.randn(512, 512, device="cuda")
for i in range(SESSIONS):
    with deepcontext.profile(output=f"{sys.argv[1]}{i}.dcprof"):
        for _ in range(i + 2):
            x = torch.tanh(x)  # SESSION_LINE
        torch.cuda.synchronize()
print("done")

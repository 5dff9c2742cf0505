"""hot_loop.cu's kernel over three steps of a schedule whose only active step is the middle one
(wait 1, active 1): 4 launches, then 1, then 4. The PC sampling test's step-range program:
argv[1] the built library, argv[2] the profile to write."""
import ctypes
import sys

import deepcontext

LAUNCHES = (4, 1, 4)

lib = ctypes.CDLL(sys.argv[1])
with deepcontext.profile(sys.argv[2], context="python,op,gpu,pc",
                         schedule=deepcontext.schedule(wait=1, active=1)) as prof:
    for launches in LAUNCHES:
        err = lib.run_hot_loop(1 << 24, 256, launches)  # CALL
        if err:
            sys.exit(f"run_hot_loop failed: CUDA error {err}")
        prof.step()
print("pc_steps done")

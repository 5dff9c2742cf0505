"""A session's start is the profiler's own work (the first session of a process loads the
compiled torch hook: ~150 ms of CPU; a later one ~9 ms): no CPU sample of it is charged to the
program's line that starts the session, nor to the lines that run next (Linux checks CPU timers
at the scheduler tick, so the first sample after capture resumes could carry, as timer overrun,
the intervals the start used since its last tick). Prints "ok".

Usage: session_start_unsampled.py OUTPUT
"""

import sys
import time

import torch

import deepcontext
from deepcontext.tree import load, views

INTERVAL = 0.001
torch.set_num_threads(1)  # the body's samples are this thread's alone (no intra-op workers' time)
x = torch.randn(256, 256)
session = deepcontext.profile(output=sys.argv[1], context="python,op", sample_interval=INTERVAL,
                              force=True)
cpu = time.thread_time()
session.start()  # START
started = time.thread_time() - cpu
cpu = time.thread_time()
for _ in range(50):
    (x @ x).relu()  # BODY
body = time.thread_time() - cpu
session.stop()
assert started >= 5 * INTERVAL, started  # (a start the sampler would have caught)
tree = views.user_frames(load(sys.argv[1]))
lines = {}
for marker in ("START", "BODY"):
    number = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith(marker))
    lines[marker] = sum(tree.inclusive(n.id, "cpu.time") for n in tree.nodes
                        if n.frame.file == __file__ and n.frame.line == number)
# the body was sampled; the start was not (stop's few microseconds before the sampler stops can
# still take one sample: the line's own time after the start returned)
assert lines["BODY"] > 0, lines
assert lines["START"] <= INTERVAL, (lines, started)
# samples count the CPU time since capture resumed, nothing from before it (the microseconds
# between the resume and the body's first line can make one more interval)
assert lines["BODY"] <= body + INTERVAL + 1e-9, (lines, body)
print("ok")

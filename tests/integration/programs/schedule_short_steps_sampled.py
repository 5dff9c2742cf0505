"""A schedule whose active steps are each shorter than the sample interval (wait=1, active=1,
steps of ~3 ms at 10 ms): the CPU samples of the active steps still add up to about their CPU
time, because a resume keeps the thread's timer in phase (only an expiry that fell in the paused
step, its signal still to come, is dropped). Prints "ok".

Usage: schedule_short_steps_sampled.py OUTPUT
"""

import sys
import time

import deepcontext
from deepcontext.tree import load, views


def work() -> None:
    sum(i * i for i in range(30_000))


active_cpu = 0.0
with deepcontext.profile(output=sys.argv[1], context="python", force=True,
                         schedule=deepcontext.schedule(wait=1, active=1)) as prof:
    for step in range(400):
        cpu = time.thread_time()
        work()  # STEP
        if step % 2 == 1:  # (steps 1, 3, 5, ...: the active ones)
            active_cpu += time.thread_time() - cpu
        prof.step()
tree = views.user_frames(load(sys.argv[1]))
number = next(i for i, text in enumerate(open(__file__), 1) if text.rstrip().endswith("# STEP"))
sampled = sum(tree.inclusive(n.id, "cpu.time") for n in tree.nodes
              if n.frame.file == __file__ and n.frame.line == number)
assert active_cpu > 0.2, active_cpu  # (steps long enough in all for ~20 samples or more)
assert 0.5 * active_cpu <= sampled <= 1.5 * active_cpu, (sampled, active_cpu)
print("ok")

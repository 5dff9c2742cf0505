"""The monitor API on JAX: a ``jax.op`` callback sees each executed operator with its full path."""

import sys

from deepcontext import monitor

seen = []


def on_op(event):
    if event.name.endswith("/dot_general"):
        seen.append((event.phase, [(f.kind, f.name, f.line) for f in monitor.callpath()]))


monitor.init(context=("python", "jax"), sample_interval=0)
monitor.register("jax.op", on_op)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


@jax.jit
def f(x):
    return x @ x  # DOT


for _ in range(int(sys.argv[1])):
    f(jnp.ones((8, 8))).block_until_ready()  # CALL
monitor.finalize()
print(len(seen))
print(seen[-1])

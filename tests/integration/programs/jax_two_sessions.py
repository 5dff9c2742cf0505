"""Two sessions in one process; a function jitted under the first is still tracked in the
second; a forked child leaves the parent's capture alone (tests/integration/test_jax_api.py)."""

import os
import sys

import jax
import jax.numpy as jnp

import deepcontext

first, second = sys.argv[1], sys.argv[2]
with deepcontext.profile(first, force=True, sample_interval=0):
    f = jax.jit(lambda x: x * 3)
    f(jnp.ones(4)).block_until_ready()  # FIRST
with deepcontext.profile(second, force=True, sample_interval=0):
    for _ in range(3):
        f(jnp.ones(4)).block_until_ready()  # SECOND
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    f(jnp.ones(4)).block_until_ready()  # AFTER_FORK


def calls(path, marker):
    line = next(i for i, t in enumerate(open(__file__).read().splitlines(), 1) if f"# {marker}" in t)
    tree = deepcontext.load(path)
    return sum(tree.exclusive(n.id, "op.count") for n in tree.nodes
               if n.frame.name == "jit(<lambda>)" and tree.nodes[n.parent].frame.line == line)


print([calls(p, m) for p in (first, second) for m in ("FIRST", "SECOND", "AFTER_FORK")])

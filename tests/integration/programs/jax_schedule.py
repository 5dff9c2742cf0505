"""A JAX step under a wait/warmup/active schedule (tests/integration/test_jax_api.py)."""

import sys

import jax
import jax.numpy as jnp

import deepcontext

out = sys.argv[1]
with deepcontext.profile(out, schedule=deepcontext.schedule(wait=1, warmup=1, active=2, repeat=1),
                         force=True, sample_interval=0) as prof:
    f = jax.jit(lambda x: jnp.sin(x) * 2)
    x = jnp.ones(8)
    for step in range(6):
        f(x).block_until_ready()  # STEP
        prof.step()
tree = deepcontext.load(out)
calls = sum(tree.exclusive(n.id, "op.count") for n in tree.nodes if n.frame.name == "jit(<lambda>)")
sins = sum(tree.exclusive(n.id, "op.count") for n in tree.nodes
           if n.frame.name == "jit(<lambda>)/sin")
waits = sum(tree.exclusive(n.id, "sync.count") for n in tree.nodes)
print(calls, sins, waits)

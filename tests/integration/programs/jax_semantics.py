"""What jax.jit returns behaves the same under the profiler: methods, lower/compile, decorator
factories, attributes, the program's own jax.profiler trace."""

import functools
import sys
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp


class Model:
    def __init__(self, scale):
        self.scale = scale

    @functools.partial(jax.jit, static_argnums=0)
    def apply(self, x):
        return jnp.sin(x) * self.scale  # METHOD


@functools.partial(jax.jit, static_argnames="power")
def power(x, power):
    return x ** power  # POWER


def plain(x):
    return jnp.cos(x) + 1  # PLAIN


plain_jit = jax.jit(plain)
x = jnp.arange(4.0)
out = [Model(2.0).apply(x), power(x, power=3), plain_jit(x)]
compiled = plain_jit.lower(x).compile()
out.append(compiled(x))
assert plain_jit.__name__ == "plain" and plain_jit.__wrapped__ is plain
assert jax.eval_shape(plain_jit, x).shape == (4,)
with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d):
        out.append(plain_jit(x + 1).block_until_ready())  # USERTRACE
    traced = len(list(Path(d).rglob("*.xplane.pb")))
for _ in range(3):
    out.append(plain_jit(x))  # AFTER
print(traced, [round(float(v.sum()), 4) for v in out])
sys.stdout.flush()

"""A small JAX program with known operators at known lines (tests/integration/test_jax_record.py)."""

import sys

import jax
import jax.numpy as jnp


@jax.jit
def predict(x, w):
    y = x @ w  # DOT
    return jnp.tanh(y)  # TANH


def loss(w, x):
    h = jnp.tanh(x @ w)  # FORWARD
    with jax.named_scope("head"):
        out = jnp.sum(h * h)  # HEAD
    return out


grad_step = jax.jit(jax.value_and_grad(loss))


def main(n: int) -> None:
    x = jnp.ones((32, 32))
    w = jnp.full((32, 32), 0.01)
    for _ in range(n):
        r = predict(x, w)  # CALL
    r.block_until_ready()  # WAIT
    predict(x + 1, w)  # CALL2
    predict(jnp.ones((16, 32)), w).block_until_ready()  # RESHAPE
    total = 0.0
    for _ in range(n):
        with jax.profiler.TraceAnnotation("train"):
            v, g = grad_step(w, x)  # STEP
        total += float(v)  # SCALAR
    print(f"done {n} {total:.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)

"""Programs with their own native thread pools, and programs whose threads come and go, run to
their normal exit under ``record`` with every ``--context`` combination.

XLA:CPU's thread pool corrupts its heap when any signal interrupts it (even a handler that
returns at once: docs/design.md, "Threads"); the sampler must never signal threads it did not
see run Python or an operator."""

from __future__ import annotations

import itertools

import pytest
from reliability_harness import profile_meta, record

LAYERS = ("python", "op", "native", "gpu")
COMBINATIONS = [",".join(c) for n in range(1, 5) for c in itertools.combinations(LAYERS, n)]

JAX_PROGRAM = '''
import jax, jax.numpy as jnp
def loss(w, x, y):
    return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
@jax.jit
def step(w, x, y):
    return w - 0.01 * jax.grad(loss)(w, x, y)
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (256, 256))
x = jax.random.normal(key, (512, 256))
y = jnp.zeros((512, 256))
for _ in range(80):
    w = step(w, x, y)
w.block_until_ready()
print("finished", bool(jnp.isfinite(w).all()))
'''

BLAS_PROGRAM = '''
import numpy as np
from concurrent.futures import ThreadPoolExecutor
a = np.random.default_rng(0).standard_normal((256, 256))
def work(i):
    b = a
    for _ in range(10):
        b = np.tanh(b @ a)
    return float(b.sum())
with ThreadPoolExecutor(4) as pool:
    total = sum(pool.map(work, range(8)))
print("finished", np.isfinite(total))
'''

CHURN_PROGRAM = '''
import threading
import torch
x = torch.ones(32, 32)
def short():
    for _ in range(3):
        torch.mm(x, x)
for wave in range(4):
    ts = [threading.Thread(target=short) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
print("finished", True)
'''


def _runs_to_the_end(tmp_path, source, context, timeout=120):
    r = record(tmp_path, source, extra_args=["--context", context], sample=0.001, timeout=timeout)
    assert r.rc == 0, r.describe()
    assert "finished True" in r.out, r.describe()
    assert profile_meta(tmp_path / "prof.dcprof", r)["complete"] is True


@pytest.mark.parametrize("context", COMBINATIONS, ids=lambda c: f"context={c}")
def test_jax_training_step_runs_to_its_end(tmp_path, context):
    pytest.importorskip("jax")
    _runs_to_the_end(tmp_path, JAX_PROGRAM, context)


@pytest.mark.parametrize("context", COMBINATIONS, ids=lambda c: f"context={c}")
def test_numpy_blas_with_its_own_pool_runs_to_its_end(tmp_path, context):
    _runs_to_the_end(tmp_path, BLAS_PROGRAM, context)


@pytest.mark.parametrize("context", COMBINATIONS, ids=lambda c: f"context={c}")
def test_threads_that_come_and_go_run_to_their_end(tmp_path, context):
    _runs_to_the_end(tmp_path, CHURN_PROGRAM, context)

"""The JAX layer's overhead: a jitted transformer training step (pure JAX: attention, MLP,
layer norm, cross-entropy, SGD, ``jax.value_and_grad``) in one process, unprofiled, under
deepcontext and under ``jax.profiler.trace``, alternating in round-robin repeats (never two
profilers at once). See benchmarks/README.md ("JAX").

    python benchmarks/jax_overhead.py                       # the backend jax picks (GPU if any)
    python benchmarks/jax_overhead.py --size cpu --steps 20 --repeats 3 --markdown out.md

XLA reads XLA_FLAGS once, when the backend starts, so every mode of one run shares one setting:
by default command buffers are off in all of them (as deepcontext sets them when it profiles from
the start, docs/jax.md); ``--keep-command-buffers`` leaves XLA's default (deepcontext then sees
command-buffer kernels under ``[marker] command buffer``). The cost of turning them off is the
ratio of the ``off`` rows of the two runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if "--keep-command-buffers" not in sys.argv and "xla_gpu_enable_command_buffer" not in \
        os.environ.get("XLA_FLAGS", ""):  # before jax is imported: see the module docstring
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_gpu_enable_command_buffer=").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import deepcontext  # noqa: E402

#: (layers, model width, heads, sequence, batch, vocabulary, dtype)
SIZES = {
    "cpu": (2, 128, 4, 64, 8, 512, "float32"),
    "gpu": (8, 1024, 16, 512, 16, 8192, "bfloat16"),
}


def init_params(key: jax.Array, layers: int, d: int, vocab: int, dtype: str) -> dict:
    def dense(k, n_in, n_out):
        return (jax.random.normal(k, (n_in, n_out), jnp.float32) / n_in ** 0.5).astype(dtype)

    keys = iter(jax.random.split(key, 4 + 6 * layers))
    blocks = [{"qkv": dense(next(keys), d, 3 * d), "out": dense(next(keys), d, d),
               "up": dense(next(keys), d, 4 * d), "down": dense(next(keys), 4 * d, d),
               "ln1": jnp.ones((d,), dtype), "ln2": jnp.ones((d,), dtype)}
              for _ in range(layers)]
    return {"embed": dense(next(keys), vocab, d), "blocks": blocks,
            "head": dense(next(keys), d, vocab)}


def layer_norm(x, scale):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale


def attention(x, block, heads):
    b, s, d = x.shape
    q, k, v = jnp.split(x @ block["qkv"], 3, axis=-1)
    q, k, v = (t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3) for t in (q, k, v))
    scores = (q @ k.transpose(0, 1, 3, 2)) / (d // heads) ** 0.5
    mask = jnp.tril(jnp.ones((s, s), bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9).astype(jnp.float32), -1)
    out = (weights.astype(x.dtype) @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    return out @ block["out"]


def forward(params, tokens, heads):
    x = params["embed"][tokens]
    for block in params["blocks"]:
        x = x + attention(layer_norm(x, block["ln1"]), block, heads)
        h = jax.nn.gelu(layer_norm(x, block["ln2"]) @ block["up"])
        x = x + h @ block["down"]
    return x @ params["head"]


def loss_fn(params, tokens, heads):
    logits = forward(params, tokens[:, :-1], heads).astype(jnp.float32)
    labels = tokens[:, 1:]
    logp = jax.nn.log_softmax(logits, -1)
    return -jnp.take_along_axis(logp, labels[..., None], -1).mean()


def train_step(params, tokens, heads):
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens, heads)
    params = jax.tree.map(lambda p, g: p - 1e-3 * g.astype(p.dtype), params, grads)
    return params, loss


def run(mode: str, size: str, steps: int, warmup: int, tmp: Path) -> dict:
    layers, d, heads, seq, batch, vocab, dtype = SIZES[size]
    params = init_params(jax.random.PRNGKey(0), layers, d, vocab, dtype)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (batch, seq + 1), 0, vocab)

    def loop(n: int, tick: Callable[[], None], step: Callable) -> float:
        nonlocal params
        t0 = time.perf_counter()
        for _ in range(n):
            params, loss = step(params, tokens)
            tick()
        loss.block_until_ready()
        return (time.perf_counter() - t0) / n

    out = tmp / f"run-{time.monotonic_ns()}"
    row: dict = {"mode": mode}
    if mode == "off":
        step = jax.jit(train_step, static_argnums=2, donate_argnums=0)
        step_fn = lambda p, t: step(p, t, heads)  # noqa: E731
        loop(warmup, lambda: None, step_fn)
        row["step_s"] = loop(steps, lambda: None, step_fn)
    elif mode == "jax.profiler":
        step = jax.jit(train_step, static_argnums=2, donate_argnums=0)
        step_fn = lambda p, t: step(p, t, heads)  # noqa: E731
        with jax.profiler.trace(str(out)):
            loop(warmup, lambda: None, step_fn)
            row["step_s"] = loop(steps, lambda: None, step_fn)
        row["size"] = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    else:
        context, _, interval = mode.removeprefix("dc[").rstrip("]").partition("@")
        kwargs = {"sample_interval": float(interval)} if interval else {}
        with deepcontext.profile(output=out, context=context, force=True, **kwargs) as prof:
            step = jax.jit(train_step, static_argnums=2, donate_argnums=0)  # made under the layer
            step_fn = lambda p, t: step(p, t, heads)  # noqa: E731
            loop(warmup, prof.step, step_fn)
            row["step_s"] = loop(steps, prof.step, step_fn)
        t0 = time.perf_counter()
        tree = deepcontext.load(out)
        row.update(size=out.stat().st_size, nodes=len(tree), load_s=time.perf_counter() - t0,
                   jax_layer=tree.metadata.get("jax_layer"), notes=tree.metadata.get("notes", []))
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    backend = jax.default_backend()
    ap.add_argument("--size", choices=sorted(SIZES), default="gpu" if backend == "gpu" else "cpu")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    default_dc = "python,op,gpu,jax" if backend == "gpu" else "python,op,jax"
    ap.add_argument("--dc", action="append", help=f"deepcontext context[@interval] (default "
                                                  f"{default_dc}; repeatable)")
    ap.add_argument("--no-jax-profiler", action="store_true")
    ap.add_argument("--keep-command-buffers", action="store_true",
                    help="leave XLA's command buffers (CUDA graphs) on in every mode")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args(argv)
    modes = ["off"] + [f"dc[{c}]" for c in (args.dc or [default_dc])]
    if not args.no_jax_profiler:
        modes.append("jax.profiler")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.repeats):
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # rotate: no order bias
                row = run(mode, args.size, args.steps, args.warmup, Path(d))
                rows.append(row)
                print(f"repeat {r + 1}/{args.repeats} {mode:26s} {row['step_s'] * 1e3:9.2f} ms/step",
                      file=sys.stderr, flush=True)
    off = statistics.median(r["step_s"] for r in rows if r["mode"] == "off")
    table = ["| mode | ms/step | x off | range | output |", "|---|---|---|---|---|"]
    for mode in modes:
        times = [r["step_s"] for r in rows if r["mode"] == mode]
        sizes = [r.get("size", 0) for r in rows if r["mode"] == mode]
        med = statistics.median(times)
        table.append(f"| {mode} | {med * 1e3:.2f} | {med / off:.3f} | {min(times) / off:.3f}-"
                     f"{max(times) / off:.3f} | {statistics.median(sizes) / 2**10:.0f} KiB |")
    last_dc = next((r for r in reversed(rows) if r["mode"].startswith("dc[")), {})
    header = [f"# JAX overhead: jitted transformer training step ({args.size} size {SIZES[args.size]})",
              "", f"command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
              f"jax {jax.__version__}, backend {backend} ({jax.devices()[0].device_kind}), "
              f"Python {platform.python_version()}, {os.cpu_count()} CPUs",
              f"steps {args.steps} (+{args.warmup} warm-up inside each profiler), "
              f"repeats {args.repeats}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}", "",
              f"last deepcontext run: layer {last_dc.get('jax_layer')}, nodes {last_dc.get('nodes')}, "
              f"notes {last_dc.get('notes')}", ""]
    text = "\n".join(header + table) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The provenance readers on real XLA output: name stacks, the optimized HLO's fusions and stack
frames, and the HLO protos in a real profiler capture."""

import inspect

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from deepcontext.capture.jax.hlo import HloModule  # noqa: E402
from deepcontext.capture.jax.names import body_start, jit_label, parse_op_name  # noqa: E402
from deepcontext.capture.jax.xspace import hlo_protos  # noqa: E402


@pytest.mark.parametrize("op_name, parsed", [
    ("jit(loss)/jvp()/dot_general", ("loss", False, [], "dot_general")),
    ("jit(loss)/transpose(jvp(attn))/transpose", ("loss", True, ["attn"], "transpose")),
    ("jit(step)/jvp(block/mlp)/jit(gelu)/tanh", ("step", False, ["block", "mlp", "jit(gelu)"], "tanh")),
    ("jit(f)/head/reduce_sum", ("f", False, ["head"], "reduce_sum")),
    ("dot_general", ("", False, [], "dot_general")),  # jax_include_full_tracebacks_in_locations=False
])
def test_name_stacks(op_name, parsed):
    assert parse_op_name(op_name) == parsed


def test_labels_and_body_frames():
    assert jit_label("jit__lambda", "jit(<lambda>)/mul") == "jit(<lambda>)"
    assert jit_label("jit_step") == "jit(step)"
    stack = (("t.py", 40, "<module>"), ("t.py", 20, "Model.loss"), ("t.py", 7, "layer"))
    assert body_start(stack, "loss") == 1
    assert body_start(stack, "multiply") == -1


def _varint(n):
    out = b""
    while True:
        out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def layer(x, w):
    h = x @ w  # line A
    return jnp.tanh(h) * 2 + 1  # line B


def test_fusions_name_their_operators_and_source_stacks():
    x = jnp.ones((16, 16))
    compiled = jax.jit(layer).lower(x, x).compile()
    (module,) = compiled.runtime_executable().hlo_modules()
    raw = module.as_serialized_hlo_module_proto()
    hlo = HloModule(b"\x0a" + _varint(len(raw)) + raw)  # an HloProto holding the module
    assert hlo.name == "jit_layer" and hlo.first_op_name().startswith("jit(layer)/")
    first = inspect.getsourcelines(layer)[1]
    by_prim = {}
    for name in hlo._by_name:
        for op in hlo.ops(name):
            by_prim.setdefault(op.primitive, set()).add((name, op.stack[-1][1], op.stack[-1][2]))
    assert {line for _, line, _ in by_prim["dot_general"]} == {first + 1}
    assert {line for _, line, _ in by_prim["tanh"]} == {first + 2}
    assert all(func == "layer" for ops in by_prim.values() for _, _, func in ops)
    # the elementwise tail is one fusion holding tanh, mul and add
    fusions = [name for name in hlo._by_name if {"tanh", "mul", "add"} <= {
        o.primitive for o in hlo.ops(name)}]
    assert fusions


def test_a_capture_holds_every_live_executables_hlo():
    from jax._src.lib import _profiler

    f = jax.jit(lambda a: jnp.sin(a) + 1)
    f(jnp.ones(4)).block_until_ready()  # compiled before the capture started
    session = _profiler.ProfilerSession(jax.profiler.ProfileOptions())
    f(jnp.ones(4)).block_until_ready()
    xspace = session.stop()
    protos = hlo_protos(xspace)
    names = {pid: HloModule(p).name for pid, p in protos.items()}
    assert "jit__lambda" in names.values()
    for pid, p in protos.items():
        assert HloModule(p).id == pid
    assert hlo_protos(xspace, known=set(protos)) == {}

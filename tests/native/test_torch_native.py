"""Real torch: native frames of libtorch sit between the user's Python line and the operator's
callback, with the operator entry frames (at::_ops::<op>::call) where the stack enters each op."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.slow]

PROBE = Path(__file__).parent / "_torch_probe.py"


def probe_line(marker: str) -> int:
    for no, text in enumerate(PROBE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# at:{marker}"):
            return no
    raise KeyError(marker)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = subprocess.run([sys.executable, str(PROBE)], capture_output=True, text=True, timeout=280,
                         cwd=tmp_path_factory.mktemp("torch_probe"))
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    if data["tier"] != "record_function":
        pytest.skip(f"operator hook tier is {data['tier']!r}, not the compiled RecordFunction hook")
    return data["ops"]


def layers(path):
    """The path as (kind, name, library basename) rows and the op names of its entry frames."""
    return [(k, n, Path(f).name) for k, n, f, _line, _op in path], [op for *_, op in path if op]


def between_line_and_callback(path, line):
    """Native rows between the user's line and the callback's Python frames; all must be native."""
    start = next(i for i, r in enumerate(path) if r[0] == "python" and r[3] == line
                 and r[2] == str(PROBE))
    end = next(i for i, r in enumerate(path) if r[0] == "python" and i > start)
    return path[start + 1:end], path[end:]


def test_matmul_enters_mm_through_native_frames(result):
    mm = result["aten::mm"]
    assert mm["status"] == "exact"
    native, tail = between_line_and_callback(mm["path"], probe_line("matmul"))
    rows, ops = layers(native)
    assert ops == ["matmul", "mm"]
    assert rows[0][:2] == ("native", "torch::autograd::THPVariable_matmul(_object*, _object*, _object*)")
    assert rows[0][2] == "libtorch_python.so"
    assert all(r[0] == "native" for r in rows)
    # The composite matmul reaches mm through at::native code of libtorch_cpu.
    names = [r[1] for r in rows]
    i_matmul = next(i for i, r in enumerate(native) if r[4] == "matmul")
    i_mm = next(i for i, r in enumerate(native) if r[4] == "mm")
    assert any(n.startswith("at::native::") for n in names[i_matmul + 1:i_mm])
    assert {r[2] for r in rows[1:]} >= {"libtorch_cpu.so"}
    # After the native frames: only the monitor's observer and the callback (Python).
    assert [r[1] for r in tail] == ["_install_observer.<locals>.observer", "on_op"]


def test_conv2d_nests_its_operators(result):
    conv = result["aten::convolution"]
    assert conv["status"] == "exact"
    native, _ = between_line_and_callback(conv["path"], probe_line("conv2d"))
    rows, ops = layers(native)
    assert ops == ["conv2d", "convolution"]
    assert "at::native::conv2d_symint" in " ".join(r[1] for r in rows)
    # Deeper operators keep every outer entry frame, outermost first.
    deepest = max(result.values(), key=lambda v: len(layers(v["path"])[1]))
    assert layers(deepest["path"])[1][:3] == ["conv2d", "convolution", "_convolution"]


def test_entry_frames_name_the_recorded_operators(result):
    # The innermost at::_ops::<op>::call of each enter event is that event's operator.
    assert result, "no operator events"
    for name, op in result.items():
        assert op["status"] == "exact", name
        assert op["innermost_op_matches"], name

"""Several devices: each kernel node names its device, and the metadata has per-device totals.

Needs two GPUs: python3 -m pytest -q -m gpu tests/gpu/test_gpu_devices.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from deepcontext.tree import load

pytestmark = pytest.mark.gpu
PROGRAMS = Path(__file__).parent / "programs"


def _gpu_count() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _line(marker: str) -> int:
    for i, text in enumerate((PROGRAMS / "two_devices.py").read_text().splitlines(), 1):
        if text.rstrip().endswith(f"# {marker}"):
            return i
    raise AssertionError(marker)


@pytest.mark.skipif(_gpu_count() < 2, reason="needs two GPUs")
def test_kernels_per_device(tmp_path: Path) -> None:
    out = tmp_path / "two.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                           sys.executable, str(PROGRAMS / "two_devices.py")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tree = load(out)
    for marker, device, count in (("DEVICE0", "0", 3), ("DEVICE1", "1", 4)):
        line = [n for n in tree.nodes if n.frame.kind == "python" and n.frame.line == _line(marker)
                and n.frame.file.endswith("two_devices.py")]
        assert len(line) == 1
        kernels = [n for n in tree.walk(line[0].id) if n.frame.kind == "kernel"]
        assert [k.frame.get("device") for k in kernels] == [device]
        assert kernels[0].metrics["gpu.launches"] == count
    devices = {d["id"]: d for d in tree.metadata["devices"]}
    assert {0, 1} <= set(devices)
    assert devices[1]["kernels"] >= 4 and devices[1]["name"] and devices[1]["sms"] > 0
    assert sum(d["kernel_time"] for d in devices.values()) == pytest.approx(
        tree.metadata["gpu"]["kernel_time"], rel=1e-6)

"""On a GPU: a libcupti whose record layouts differ from this build's headers (another CUDA
major) is refused with a one-line note; the program runs unchanged and unprofiled on the GPU.

Needs a libcupti of another CUDA major than the build's headers: $DEEPCONTEXT_TEST_OTHER_CUPTI,
else one found in the nvidia-* wheels or /usr/local/cuda-*. For example:
  python -m pip install --target /tmp/cu12cupti nvidia-cuda-cupti-cu12
  DEEPCONTEXT_TEST_OTHER_CUPTI=$(ls /tmp/cu12cupti/nvidia/cuda_cupti/lib/libcupti.so.12*) \\
    python -m pytest -q -m gpu tests/gpu/test_cupti_version.py
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import sysconfig

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.torch]

PROGRAM = """
import torch
x = torch.ones(256, 256, device="cuda")
print((x @ x).sum().item())
"""


def _other_cupti() -> str | None:
    forced = os.environ.get("DEEPCONTEXT_TEST_OTHER_CUPTI")
    if forced:
        return forced
    site = sysconfig.get_paths()["purelib"]
    found = sorted(glob.glob(os.path.join(site, "nvidia", "cuda_cupti", "lib", "libcupti.so.12*")))
    found += sorted(glob.glob("/usr/local/cuda-12*/extras/CUPTI/lib64/libcupti.so.12*"))
    return found[0] if found else None


def test_a_cupti_of_another_major_is_refused_with_one_note(tmp_path):
    other = _other_cupti()
    if other is None:
        pytest.skip("no libcupti of CUDA 12 here (set DEEPCONTEXT_TEST_OTHER_CUPTI)")
    (tmp_path / "prog.py").write_text(PROGRAM)
    env = {**os.environ, "DEEPCONTEXT_CUPTI_LIB": other}
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", "p.dcprof", "--",
                           sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{256.0 ** 3}\n"
    from deepcontext.tree import load

    meta = load(tmp_path / "p.dcprof").metadata
    notes = [n for n in meta["notes"] if n.startswith("GPU capture off: ")]
    assert len(notes) == 1, json.dumps(meta["notes"], indent=1)
    assert "(CUDA 12) but this build reads the records of CUPTI 13" in notes[0]
    assert "\n" not in notes[0]
    assert notes[0] in proc.stderr  # said at once, not only in the profile

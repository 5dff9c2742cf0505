"""GPU kernels under dynamic shapes: one node per kernel and context, not per launch shape.

Run on a GPU machine: python -m pytest -q -m gpu tests/reliability/test_core_gpu.py"""

from __future__ import annotations

import pytest
from reliability_harness import record, report_json

pytestmark = pytest.mark.gpu


def test_dynamic_shapes_do_not_grow_the_tree(tmp_path):
    r = record(tmp_path, '''
import torch
x = torch.ones(1, device="cuda")
for n in range(1, 41):
    y = torch.full((n * 97,), 2.0, device="cuda") * 3.0  # at: the launch line
torch.cuda.synchronize()
''', timeout=300)
    assert r.rc == 0, r.describe()
    doc = report_json(tmp_path, tmp_path / "prof.dcprof", "--metric", "gpu.launches")
    stack, kernels = [(False, doc["tree"])], []
    while stack:
        under, node = stack.pop()
        under = under or node["frame"].get("line") == 5
        if under and node["frame"]["kind"] == "kernel":
            kernels.append(node)
        stack.extend((under, c) for c in node["children"])
    # 40 shapes of a fill and a multiply: 80 launches, one node per kernel name (the old core
    # made one per grid, 40 or more).
    names = [k["frame"]["name"] for k in kernels]
    assert len(names) == len(set(names)), names
    assert sum(k["metrics"]["gpu.launches"] for k in kernels) == 80.0

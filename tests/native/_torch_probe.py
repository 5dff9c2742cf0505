"""Runs torch CPU ops under the monitor and prints, as JSON, the spliced native call path seen
from inside each operator's enter callback (tests/native/test_torch_native.py)."""

from __future__ import annotations

import json
import sys

import torch

import deepcontext.monitor as monitor
from deepcontext import _core

seen: dict[str, list] = {}


def on_op(event) -> None:
    if event.phase == "enter" and event.name not in seen:
        status, path = _core.testing.native_callpath(with_status=True)
        seen[event.name] = [status, path]


def main() -> None:
    monitor.init(context=("python", "op", "nested"), sample_interval=0)  # every operator
    monitor.register("torch.op", on_op)
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    x, w = torch.randn(1, 3, 16, 16), torch.randn(4, 3, 3, 3)
    torch.matmul(a, b)  # at:matmul
    torch.nn.functional.conv2d(x, w)  # at:conv2d
    monitor.finalize()
    ops = {}
    for name, (status, path) in seen.items():
        rows = []
        for kind, fn, file, line in path:
            op = _core.testing.native_op_call_frame(fn) if kind == "native" else None
            rows.append([kind, fn, file, line, op])
        innermost = [r[4] for r in rows if r[4]][-1:]
        matches = bool(innermost) and _core.testing.native_op_name_matches(innermost[0], name)
        ops[name] = {"status": status, "path": rows, "innermost_op_matches": matches}
    json.dump({"tier": monitor._state.get("torch_tier"), "ops": ops}, sys.stdout)


if __name__ == "__main__":
    main()

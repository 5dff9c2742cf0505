import torch

from deepcontext import monitor

seen = []


def on_op(event):
    if event.phase == "enter" and event.name == "aten::mul":
        seen.append([(f.kind, f.name, f.line) for f in monitor.callpath()])


def caller():
    return torch.mul(torch.ones(2), 3)  # CALL


monitor.init(context=("python", "op"), sample_interval=0)
monitor.register("torch.op", on_op)
caller()
monitor.finalize()
print(seen[-1])

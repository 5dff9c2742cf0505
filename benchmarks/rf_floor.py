"""The floor of any RecordFunction-based operator layer: what an EMPTY global RecordFunction
callback costs a launch-bound workload, installed, disabled (``at::disableCallback``) and
removed. Compiles a tiny extension (~20 s, once). CPU time per step, median of round-robin repeats.

    python benchmarks/rf_floor.py [--workload tiny_mlp] [--repeats 7] [--threads 1]
    python benchmarks/rf_floor.py --workload gpt2_train --device cuda   # a model_zoo.py model
"""

from __future__ import annotations

import argparse
import statistics
import time

import model_zoo
import torch
import workloads
from torch.utils import cpp_extension

SOURCE = r"""
#include <ATen/record_function.h>
#include <torch/extension.h>
namespace {
at::CallbackHandle handle = 0;
std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction&) { return nullptr; }
void on_exit(const at::RecordFunction&, at::ObserverContext*) {}
void add_cb(bool ids) {
  handle = at::addGlobalCallback(at::RecordFunctionCallback(on_enter, on_exit)
      .needsInputs(false).needsOutputs(false).needsIds(ids)
      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
               at::RecordScope::USER_SCOPE}));
}
void disable_cb() { at::disableCallback(handle); }
void enable_cb() { at::reenableCallback(handle); }
void remove_cb() { at::removeCallback(handle); }
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add", &add_cb); m.def("disable", &disable_cb);
  m.def("enable", &enable_cb); m.def("remove", &remove_cb);
}
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="tiny_mlp")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu", help="for model_zoo.py models (cpu: --small sizes)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rf = cpp_extension.load_inline("dc_rf_floor", cpp_sources=SOURCE, extra_cflags=["-O2"])
    if args.workload in model_zoo.MODELS:
        builder, block = model_zoo.MODELS[args.workload]
        model_step = builder(args.device, args.device == "cpu")

        step = model_step
        args.steps = min(args.steps, 3 * block)
    else:
        step = workloads.build(args.workload, "cpu")
    for _ in range(30 if args.workload not in model_zoo.MODELS else 5):
        step()

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    walls: dict[str, list[float]] = {}

    def cpu_ms(name: str) -> float:
        # The main thread's CPU time (a GPU step's queue waits spin in the block's final sync,
        # so that is left out); wall time beside it, for GPU steps.
        sync()
        c, w = time.thread_time(), time.perf_counter()
        for _ in range(args.steps):
            step()
        cpu = time.thread_time() - c
        sync()
        walls.setdefault(name, []).append((time.perf_counter() - w) / args.steps * 1e3)
        return cpu / args.steps * 1e3

    res: dict[str, list[float]] = {k: [] for k in ("none", "empty", "empty+ids", "disabled", "removed")}
    for _ in range(args.repeats):
        res["none"].append(cpu_ms("none"))
        rf.add(False)
        res["empty"].append(cpu_ms("empty"))
        rf.remove()
        rf.add(True)
        res["empty+ids"].append(cpu_ms("empty+ids"))
        rf.disable()
        res["disabled"].append(cpu_ms("disabled"))
        rf.enable()
        rf.remove()
        res["removed"].append(cpu_ms("removed"))
    base = statistics.median(res["none"])
    wbase = statistics.median(walls["none"])
    for name, values in res.items():
        med, wall = statistics.median(values), statistics.median(walls[name])
        print(f"{args.workload} {name:10s} {med:.3f} CPU ms/step  x{med / base:.3f}   "
              f"wall {wall:.3f} ms/step  x{wall / wbase:.3f}")


if __name__ == "__main__":
    main()

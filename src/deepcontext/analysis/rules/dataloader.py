"""Data loading in the main process: with num_workers=0 the training loop stops every step
while the DataLoader fetches and collates the batch on the same thread.

The DataLoader wraps each ``__next__`` in a record_function named
``enumerate(DataLoader)#<iterator class>.__next__``, so the operator layer measures the loading
wall time exactly; the iterator's Python frames are the fallback when operators are not captured."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from ...tree.frame import OP, PYTHON, Frame
from ..context import AnalysisContext
from ..finding import Finding
from ..rule import Rule, Threshold
from ._common import is_hf_trainer_file, percent, seconds

_SINGLE = "_SingleProcessDataLoaderIter."
_SINGLE_OP = "enumerate(DataLoader)#_SingleProcessDataLoaderIter"


def _is_loader_file(path: str) -> bool:
    return path.replace("\\", "/").endswith("torch/utils/data/dataloader.py")


def _built_by_hf_trainer(f: Frame) -> bool:
    # Hugging Face's Trainer builds its DataLoaders from TrainingArguments: the user's code has
    # no DataLoader(...) call to change.
    return f.kind == PYTHON and is_hf_trainer_file(f.file)


def _is_loader_frame(f: Frame) -> bool:
    if f.kind == OP:
        return f.name.startswith(_SINGLE_OP)
    return f.kind == PYTHON and f.name.startswith(_SINGLE) and _is_loader_file(f.file)


_FIX = ("load in worker processes: DataLoader(dataset, num_workers=4, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2) (start with the number of free cores)")
_TRAINER_FIX = ("the Hugging Face Trainer builds this DataLoader: load in worker processes with "
                "TrainingArguments(..., dataloader_num_workers=4, "
                "dataloader_persistent_workers=True, dataloader_prefetch_factor=2) "
                "(start with the number of free cores)")


class DataLoaderRule(Rule):
    id = "dataloader-main-process"
    category = "dataloader"
    description = ("The step waits for batches loaded in the main process "
                   "(DataLoader with num_workers=0).")
    thresholds = {
        # TensorBoard's profiler plugin recommended workers above 5% of the step.
        "warning_fraction": Threshold(0.05, "TensorBoard profiler's rule: data loading above 5% "
                                            "of the step deserves worker processes"),
    }

    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        spent: dict[int, float] = defaultdict(float)
        by_trainer: dict[int, bool] = {}
        for node in ctx.tree.nodes[1:]:
            if not _is_loader_frame(node.frame) or ctx.owner[node.id] <= 0:
                continue
            above = [ctx.tree.nodes[a].frame for a in ctx.ancestors(node.parent)]
            if any(_is_loader_frame(f) for f in above):
                continue  # count the outermost loading frame of each path once
            owner = ctx.owner[node.id]
            spent[owner] += ctx.host_time(node.id)
            by_trainer[owner] = by_trainer.get(owner, True) and any(
                map(_built_by_hf_trainer, above))
        for owner, t in spent.items():
            severity = self.severity_for(ctx, t)
            if severity is None:
                continue
            yield ctx.finding(
                self, owner, severity=severity,
                title=f"batches load in the main process at {ctx.where(owner)} "
                      f"({percent(ctx.fraction(t))} of the run)",
                message=(f"{'The Trainer' if by_trainer[owner] else 'The loop'} at "
                         f"{ctx.where(owner)} fetches and collates its batches in "
                         f"the main process (DataLoader num_workers=0): {seconds(t)}, "
                         f"{percent(ctx.fraction(t))} of the run, during which no training "
                         f"work is issued."),
                evidence={"loading_time_s": t},
                suggestion=_TRAINER_FIX if by_trainer[owner] else _FIX,
                gain_seconds=t,
                method="upper bound: loading overlaps the step once it runs in workers")


RULES = [DataLoaderRule]

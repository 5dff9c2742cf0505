"""The distributed rules on literal multi-rank trees: exact rank, line and counts; and the
silence that must hold on balanced jobs."""

from __future__ import annotations

from deepcontext.analysis.engine import analyze
from deepcontext.analysis.rules.distributed import (
    BlockingCollectiveRule,
    PerParameterCollectiveRule,
    StragglerRule,
)
from deepcontext.analysis.testing import build, lib, marker, op, user
from deepcontext.tree.merge import merge_profiles

STEP, WORK, REDUCE, SAVE = user(10, "main"), user(20, "work"), user(11, "main"), user(30, "main")
ALLREDUCE = op("c10d::allreduce_")
GLOO = op("gloo:all_reduce")


def job(per_rank):
    """A merged job from {rank: [(frames, metrics), ...]}."""
    trees = []
    for rank, paths in per_rank.items():
        t = build(paths, {"rank": rank, "start_time": 0.0, "end_time": 4.0})
        trees.append(t)
    return merge_profiles(trees, [f"r{r}" for r in per_rank])


def step(work_s, wait_s, outer=()):
    """One rank's step: work at a line, then an all-reduce whose backend scope (gloo's worker,
    nested under the operator as in real profiles) waits ``wait_s`` for the peers."""
    return [([*outer, STEP, WORK, op("aten::mm")], {"cpu.time": work_s, "op.time": work_s}),
            ([*outer, REDUCE, ALLREDUCE], {"op.time": 0.001, "op.count": 10}),
            ([*outer, REDUCE, ALLREDUCE, GLOO], {"op.time": wait_s})]


def test_straggler_names_rank_and_line():
    tree = job({0: step(1.0, 1.5), 1: step(2.5, 0.01), 2: step(1.0, 1.5)})
    (f,) = analyze(tree, [StragglerRule])
    assert f.rule == "rank-straggler" and f.evidence["rank"] == 1
    assert f.location.line == 20 and f.location.function == "work"
    assert f.evidence["rank_time_s"] == 2.5 and f.evidence["others_median_s"] == 1.0
    assert f.evidence["ranks"] == 3


def test_the_wait_inside_an_outer_line_does_not_hide_its_cpu_work():
    # the work is CPU time outside operators; the outer line's operator time is nearly all the
    # wait (rank 0: 1.5 s): the wait leaves each metric before they are combined, so the outer
    # line keeps rank 0's 1 s of work and the deeper line is named
    outer = (user(5, "<module>"),)
    work = lambda s: ([*outer, STEP, WORK], {"cpu.time": s})  # noqa: E731
    tree = job({0: [work(1.0), *step(0.0, 1.5, outer)[1:]],
                1: [work(2.5), *step(0.0, 0.0, outer)[1:]]})
    (f,) = analyze(tree, [StragglerRule])
    assert f.evidence["rank"] == 1 and f.location.line == 20
    assert f.evidence["rank_time_s"] == 2.5 and f.evidence["others_median_s"] == 1.0


def _outer_job(lines_by_rank, waits, extra=None):
    """Ranks whose lines (frames, CPU seconds) sit under one outer line (``main()`` at module
    level), then an all-reduce where each rank waits ``waits[rank]``; ``extra`` adds paths
    (frames, metrics) under the outer line on some ranks."""
    outer = (user(5, "<module>"),)
    return job({r: [*[([*outer, *frames], {"cpu.time": s}) for frames, s in lines],
                    *[([*outer, *frames], m) for frames, m in (extra or {}).get(r, ())],
                    *step(0.0, waits[r], outer)[1:]] for r, lines in lines_by_rank.items()})


def test_noise_in_other_lines_does_not_move_the_straggler_to_the_caller():
    # a loading line costs 1.4 s on rank 0 and 1.65 s on rank 1 (18%, noise), and rank 1 busies
    # 0.9 s; the outer line's excess is 1.15 s, the busy line's 78% of it; without the noise
    # the busy line holds all of it and is named
    load = [user(12, "main"), lib("DataLoader.__next__", "/x/torch/utils/data/dataloader.py")]
    busy = [user(14, "main"), WORK]
    tree = _outer_job({0: [(load, 1.4)], 1: [(load, 1.65), (busy, 0.9)]}, {0: 1.0, 1: 0.0})
    (f,) = analyze(tree, [StragglerRule])
    assert f.evidence["rank"] == 1 and f.location.line == 20
    assert f.evidence["rank_time_s"] == 0.9 and f.evidence["others_median_s"] == 0.0


def test_set_up_and_its_waits_are_not_the_steps():
    # as in a CI run: a lazy import under DDP(...) is 0.35 s longer on rank 1, and rank 1 waits
    # 0.54 s in DDP's set-up all-gather for rank 0, which started later; only the steps'
    # straggle (0.9 s at the busy line, rank 0 waiting 1.0 s in the step's all-reduce) is named
    ddp = [user(12, "main"), lib("DistributedDataParallel.__init__", "/x/torch/nn/parallel/d.py")]
    setup_wait = {1: [([*ddp, op("c10d::allgather_")], {"op.time": 0.54})]}
    busy = [user(14, "main"), WORK]
    tree = _outer_job({0: [(ddp, 1.1)], 1: [(ddp, 1.45), (busy, 0.9)]}, {0: 1.0, 1: 0.0},
                      setup_wait)
    bare = _outer_job({0: [(ddp, 1.1)], 1: [(ddp, 1.45)]}, {0: 0.0, 1: 0.0}, setup_wait)
    (f,) = analyze(tree, [StragglerRule])
    assert f.evidence["rank"] == 1 and f.location.line == 20
    assert round(f.evidence["others_extra_wait_s"], 9) == 1.0  # not 1.54: set-up is left out
    assert analyze(bare, [StragglerRule]) == []


def test_a_rank_slower_all_over_is_named_at_the_caller():
    # most of the excess is in a line only 24% slower: the small line that is 3x slower does
    # not explain the rank, the caller that holds both is named
    a, c = [user(12, "main"), op("aten::mm")], [user(14, "main"), WORK]
    tree = _outer_job({0: [(a, 1.0), (c, 0.1)], 1: [(a, 1.24), (c, 0.3)]}, {0: 0.5, 1: 0.0})
    (f,) = analyze(tree, [StragglerRule])
    assert f.evidence["rank"] == 1 and f.location.line == 5
    assert round(f.evidence["rank_time_s"], 6) == 1.54


def test_balanced_ranks_and_single_profiles_have_no_straggler():
    assert analyze(job({0: step(1.0, 0.2), 1: step(1.05, 0.2)}), [StragglerRule]) == []
    assert analyze(build(step(2.5, 0.0)), [StragglerRule]) == []


def test_extra_time_nobody_waits_for_is_not_a_straggler():
    # rank 1 is slower at the line but the others do not wait longer in collectives
    assert analyze(job({0: step(1.0, 0.2), 1: step(2.5, 0.2)}), [StragglerRule]) == []


def test_blocking_collective_outside_backward_but_not_ddp_buckets_or_setup():
    tree = build([
        ([REDUCE, lib("all_reduce", "/x/torch/distributed/distributed_c10d.py"), ALLREDUCE],
         {"op.time": 0.5, "op.count": 4}),
        ([STEP, marker(), op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"),
          ALLREDUCE], {"op.time": 0.5, "op.count": 4}),
        ([SAVE, lib("DistributedDataParallel.__init__", "/x/torch/nn/parallel/distributed.py"),
          op("c10d::broadcast_")], {"op.time": 0.5, "op.count": 1}),
        ([STEP, op("aten::mm")], {"op.time": 1.0, "op.count": 4}),
    ])
    (f,) = analyze(tree, [BlockingCollectiveRule])
    assert f.location.line == 11 and f.evidence["calls"] == 4


def test_one_collective_per_parameter():
    acc = op("torch::autograd::AccumulateGrad")
    tree = build([
        ([STEP, marker(), acc], {"op.count": 24, "op.time": 0.01}),
        ([REDUCE, ALLREDUCE], {"op.count": 24, "op.time": 0.2}),
        ([SAVE, ALLREDUCE], {"op.count": 2, "op.time": 0.01}),
    ])
    (f,) = analyze(tree, [PerParameterCollectiveRule])
    assert f.location.line == 11
    assert (f.evidence["calls"], f.evidence["gradients"]) == (24, 24)

"""The viewer on a merged multi-rank profile: the sums drawn, each rank's own values in the
details and the tooltip, exact."""

from __future__ import annotations

from test_viewer import click_node

from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import Frame
from deepcontext.tree.merge import merge_profiles

STEP = Frame.make("python", "step", "/w/train.py", 4)
WORK = Frame.make("python", "work", "/w/train.py", 9)
REDUCE = Frame.make("op", "c10d::allreduce_")


def rank_tree(rank: int, work: float, wait: float) -> CallingContextTree:
    t = CallingContextTree({"command": ["torchrun", "train.py"], "rank": rank, "world_size": 2})
    t.add_metric(t.add_path([STEP, WORK]), "cpu.time", work)
    reduce = t.add_path([STEP, REDUCE])
    t.add_metric(reduce, "op.time", wait)
    t.add_metric(reduce, "comm.bytes", 4096)
    return t


def test_each_ranks_own_values_are_in_the_details(open_viewer):
    merged = merge_profiles([rank_tree(0, 1.0, 1.5), rank_tree(1, 2.5, 0.25)],
                            ["job.rank0.dcprof", "job.rank1.dcprof"])
    v = open_viewer(merged, "job")
    assert v.errors == []
    assert v.api("ranks()") == [0, 1]
    assert "2 ranks (0, 1)" in v.page.locator("#dc-status").text_content()
    work = v.api("findNode('work')")
    assert v.api("inclusive(%d, 'cpu.time')" % work) == 3.5  # drawn: the sum
    assert [v.api("rankInclusive(%d, %d, 'cpu.time')" % (work, r)) for r in (0, 1)] == [1.0, 2.5]
    click_node(v, work)
    rows = v.page.locator("#dc-details-body table.dc-ranks tr").all_text_contents()
    assert rows == ["rankcpu.timeshare", "rank 01s100.0%", "rank 12.5s100.0%"]
    # another metric: the details follow it
    v.api("setMetric('op.time')")
    v.api("select(%d)" % v.api("findNode('c10d::allreduce_')"))
    rows = v.page.locator("#dc-details-body table.dc-ranks tr").all_text_contents()
    assert rows == ["rankop.timeshare", "rank 01.5s100.0%", "rank 1250ms100.0%"]
    reduce = v.api("findNode('c10d::allreduce_')")
    assert [v.api("rankInclusive(%d, %d, 'comm.bytes')" % (reduce, r)) for r in (0, 1)] == [4096, 4096]


def test_a_single_rank_profile_has_no_rank_table(open_viewer):
    v = open_viewer(rank_tree(0, 1.0, 1.5), "single")
    assert v.api("ranks()") == []
    click_node(v, v.api("findNode('work')"))
    assert v.page.locator("#dc-details-body table.dc-ranks").count() == 0

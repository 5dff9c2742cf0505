"""Adding profiles together: the per-rank files of a job become one profile that keeps each
rank's own values beside their sum, so ranks can still be compared."""

from __future__ import annotations

from typing import Any

from .cct import CallingContextTree


def rank_of(tree: CallingContextTree) -> int | None:
    """The rank a single-process profile was written by (``meta.rank``), else None."""
    rank = tree.metadata.get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0 else None


def merge_profiles(trees: list[CallingContextTree], sources: list[str]) -> CallingContextTree:
    """One tree with every context of every input; metrics of equal contexts are added.

    Per-rank values are kept when every input is one rank's profile or a merged job and no rank
    appears twice; otherwise (profiles of separate runs, say) only the sums are kept and a note
    says why."""
    ranks: list[list[int]] = [[r] if (r := rank_of(t)) is not None else t.ranks() for t in trees]
    flat = [r for rs in ranks for r in rs]
    keep_ranks = all(ranks) and len(flat) == len(set(flat))
    notes = sorted({str(n) for t in trees for n in t.metadata.get("notes") or []})
    if any(ranks) and not keep_ranks:
        notes.append("per-rank values were dropped: the inputs are not distinct ranks of one job")
    meta: dict[str, Any] = {
        "merged_from": sources,
        "command": trees[0].metadata.get("command"),
        "complete": all(t.metadata.get("complete") is True for t in trees),
        "notes": notes,
    }
    for key in ("start_time", "end_time"):
        values = [t.metadata.get(key) for t in trees]
        if all(isinstance(v, (int, float)) for v in values):
            meta[key] = min(values) if key == "start_time" else max(values)
    for key in ("context", "sample_interval", "torch", "op_tier", "job"):
        values = {repr(t.metadata.get(key)) for t in trees}
        if len(values) == 1 and trees[0].metadata.get(key) is not None:
            meta[key] = trees[0].metadata[key]
    if keep_ranks:
        entries = [_rank_entry(t, src) for t, src in zip(trees, sources) if rank_of(t) is not None]
        for t in trees:  # merged jobs bring their own entries
            if rank_of(t) is None and isinstance(t.metadata.get("ranks"), list):
                entries += t.metadata["ranks"]
        entries.sort(key=lambda e: e["rank"] if isinstance(e, dict) and type(e.get("rank")) is int
                     else -1)
        meta["ranks"] = entries
        sizes = {w for t in trees if type(w := t.metadata.get("world_size")) is int}
        if len(sizes) == 1:
            meta["world_size"] = sizes.pop()
    out = CallingContextTree(meta)
    for tree in trees:
        out.merge(tree, rank=rank_of(tree) if keep_ranks else None)
    if not keep_ranks:
        out.rank_metrics.clear()
    return out


def _rank_entry(tree: CallingContextTree, source: str) -> dict[str, Any]:
    m = tree.metadata
    return {"rank": rank_of(tree), "file": source, "host": m.get("host"), "pid": m.get("pid"),
            "local_rank": m.get("local_rank"), "complete": m.get("complete") is True,
            "start_time": m.get("start_time"), "end_time": m.get("end_time")}


def select_rank(tree: CallingContextTree, rank: int | None) -> CallingContextTree:
    """``--rank N`` of report, analyze, view and diff: that rank's own values of a merged job."""
    if rank is None:
        return tree
    if rank_of(tree) == rank:
        return tree
    if rank not in tree.rank_metrics:
        from ..errors import DeepContextError

        have = ",".join(map(str, tree.ranks())) or "none (not a merged multi-rank profile)"
        raise DeepContextError(f"--rank {rank}: this profile has no values of rank {rank} "
                               f"(ranks: {have})")
    return tree.rank_view(rank)

"""Multi-rank jobs under ``record``: every rank profiled from one command.

The interpreter ``record`` starts (the *top*: torchrun, ``python -m torch.distributed.run``,
``accelerate launch``, or a script that calls ``mp.spawn``) keeps the bootstrap's variables in
its environment with a job token, so the Python processes it starts run the bootstrap too. A
descendant is profiled only when it is a rank:

- a launcher set ``RANK`` in its environment (torchrun and everything built on it): profiled
  from its first line into ``<out>.rank<RANK>.dcprof``;
- a ``multiprocessing`` spawn child (``torch.multiprocessing.spawn``) that joins a process
  group: profiled from ``init_process_group`` on, into ``<out>.rank<rank>.dcprof``;
- the one worker ``accelerate launch`` starts without a launcher of ranks (``--cpu``): its
  direct child carrying accelerate's variables, profiled as rank 0 of one.

Every descendant removes the variables at once, so a rank's own children (spawned DataLoader
workers, compile workers) and plain subprocesses are never profiled; forked children never
write anyway (session.py). When the top ends and rank files of its job exist, its own profile
moves to ``<out>.launcher.dcprof`` and ``<out>`` becomes the merged profile of the ranks, which
keeps each rank's values (docs/multi-rank.md).
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .session import Session

ENV = "DEEPCONTEXT_RECORD"


def rank_path(output: str | os.PathLike[str], rank: int | str) -> Path:
    """``out.dcprof`` -> ``out.rank3.dcprof``."""
    p = Path(output)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix or '.dcprof'}")


def launcher_path(output: str | os.PathLike[str]) -> Path:
    p = Path(output)
    return p.with_name(f"{p.stem}.launcher{p.suffix or '.dcprof'}")


def job_files(output: str | os.PathLike[str]) -> list[Path]:
    """The files a job under ``record -o output`` writes besides ``output``, existing now."""
    p = Path(output)
    suffix = re.escape(p.suffix or ".dcprof")
    pattern = re.compile(rf"{re.escape(p.stem)}\.(rank\d+|launcher){suffix}")
    if not p.parent.is_dir():
        return []
    return sorted(q for q in p.parent.iterdir() if pattern.fullmatch(q.name))


def _is_rank_environment() -> bool:
    """This process is one rank of a multi-rank job it was started into (RANK, WORLD_SIZE > 1)."""
    return os.environ.get("RANK") is not None and os.environ.get("WORLD_SIZE", "1") != "1"


def _int_env(name: str) -> int | None:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


class RankSession(Session):
    """A session of one rank: its metadata says which rank of which job it profiles."""

    def __init__(self, output: Path, config: dict[str, Any], rank: int,
                 world_size: int | None) -> None:
        super().__init__(output, context=config["context"],
                         flush_interval=config["flush_interval"],
                         sample_interval=config["sample_interval"], force=True,
                         command=[sys.executable, *sys.argv], split_ranks=False)
        self.rank_info = {"rank": rank, "world_size": world_size,
                          "local_rank": _int_env("LOCAL_RANK"), "job": config["job"]}

    def metadata(self, complete: bool) -> dict[str, Any]:
        meta = super().metadata(complete)
        meta.update({k: v for k, v in self.rank_info.items() if v is not None})
        return meta


class TopSession(Session):
    """The session of the interpreter ``record`` started. When it ends, the rank files its job
    left become its output (merged), and its own profile moves beside them."""

    def __init__(self, *args: Any, job: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job = job

    def _say_where(self) -> None:
        if self._write_failed:
            return
        try:
            ranks = finish_job(self.output, self.job, self.command)
        except Exception as e:  # noqa: BLE001 - the program's exit must not change
            print(f"deepcontext: cannot merge the ranks' profiles into {self.output} ({e}); "
                  f"merge them with: deepcontext merge", file=sys.stderr, flush=True)
            return
        if not ranks or not self.announce:
            super()._say_where()
            return
        names = ", ".join(p.name for p in ranks)
        print(f"deepcontext: profile of {len(ranks)} rank{'s' if len(ranks) > 1 else ''} "
              f"written to {self.output} "
              f"(per rank: {names}; the launcher: {launcher_path(self.output).name}); "
              f"read it with: deepcontext report {self.output}", file=sys.stderr, flush=True)


def finish_job(output: Path, job: str, command: list[str]) -> list[Path]:
    """Merge the rank files of ``job`` into ``output`` (the top's own profile moves to
    ``<out>.launcher.dcprof``); returns the rank files merged, none if the job had no ranks."""
    from ..errors import ProfileFormatError
    from ..tree.merge import merge_profiles, rank_of
    from ..tree.profile_file import load, save

    found = []
    for path in job_files(output):
        if path.name == launcher_path(output).name:
            continue
        try:
            tree = load(path)
        except ProfileFormatError as e:
            print(f"deepcontext: {e}; left out of the merge", file=sys.stderr, flush=True)
            continue
        if tree.metadata.get("job") == job:
            found.append((path, tree))
    if not found:
        return []
    found.sort(key=lambda pt: rank_of(pt[1]) or 0)
    launcher = launcher_path(output)
    os.replace(output, launcher)
    merged = merge_profiles([t for _, t in found], [p.name for p, _ in found])
    merged.metadata["launcher"] = launcher.name
    merged.metadata["command"] = command
    partial = output.with_name(f".{output.name}.merging")
    save(merged, partial, force=True)
    os.replace(partial, output)
    return [p for p, _ in found]


# -- the bootstrap's entry points --------------------------------------------------------------
def top_session_class(config: dict[str, Any], bootstrap_dir: str) -> Callable[..., Session]:
    """The session class for the interpreter ``record`` started. Unless it is itself one rank
    (started with RANK set), it hands the bootstrap on to the processes it starts, with a job
    token, so their ranks are profiled, and merges their files when it ends."""
    if _is_rank_environment():
        return Session
    job = f"{os.getpid()}-{time.time_ns()}"
    os.environ[ENV] = json.dumps({**config, "job": job, "top_pid": os.getpid()})
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [bootstrap_dir, *filter(None, [os.environ.get("PYTHONPATH")])])
    return functools.partial(TopSession, job=job)


def start_launched_rank(config: dict[str, Any]) -> None:
    """A descendant a launcher started with RANK set: profile it from its first line."""
    rank = _int_env("RANK")
    if rank is not None:
        RankSession(rank_path(config["output"], rank), config, rank, _int_env("WORLD_SIZE")).start()


def start_single_worker(config: dict[str, Any]) -> None:
    """The one worker ``accelerate launch`` starts itself (``--cpu``, or one process): the
    program, profiled from its first line as rank 0 of a job of one."""
    RankSession(rank_path(config["output"], 0), config, 0, 1).start()


def start_at_init_process_group(c10d: Any, config: dict[str, Any]) -> None:
    """A spawned child (mp.spawn) becomes a rank when it joins a process group: start profiling
    then, named by the rank the group gives it. ``c10d`` is torch.distributed.distributed_c10d,
    just imported (the bootstrap waits for it); children that never join stay unprofiled."""
    original = getattr(c10d, "_update_default_pg", None)
    if original is None:
        return

    def _update_default_pg(pg: Any) -> None:
        original(pg)
        if getattr(_update_default_pg, "started", False) or pg is None:
            return
        try:
            rank, size = int(pg.rank()), int(pg.size())
        except Exception:  # noqa: BLE001 - e.g. a non-member placeholder group
            return
        if rank < 0:
            return
        _update_default_pg.started = True  # type: ignore[attr-defined]
        try:
            RankSession(rank_path(config["output"], rank), config, rank, size).start()
        except Exception as e:  # noqa: BLE001 - never stop the user's program
            print(f"deepcontext: profiling of rank {rank} not started: {e}",
                  file=sys.stderr, flush=True)

    c10d._update_default_pg = _update_default_pg


def check_outputs_free(output: Path, force: bool) -> None:
    """``record`` refuses a job whose rank files would meet an earlier job's. (With ``--force``
    they are overwritten; the merge takes only files carrying this job's token either way.)"""
    from ..errors import DeepContextError

    stale = job_files(output)
    if stale and not force:
        raise DeepContextError(f"{stale[0]} already exists (an earlier job's); pass --force to "
                               "overwrite it or -o to pick another name")

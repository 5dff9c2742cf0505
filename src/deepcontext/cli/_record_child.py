"""The profiled program's side of ``record``: start a session from the bootstrap's config."""

from __future__ import annotations

import json
import sys


def start_from_config(config_json: str, bootstrap_dir: str) -> None:
    try:
        from ..capture.ranks import top_session_class

        cfg = json.loads(config_json)
        session_class = top_session_class(cfg, bootstrap_dir)  # a launcher's also merges ranks
        session = session_class(cfg["output"], context=cfg["context"],
                                flush_interval=cfg["flush_interval"],
                                sample_interval=cfg["sample_interval"], force=cfg["force"],
                                command=cfg["command"], split_ranks=False,
                                hooks=cfg.get("hooks") or None, perf=cfg.get("perf", False))
        session.announce = True
        session.start()
    except Exception as e:  # noqa: BLE001 - never stop the user's program from starting
        print(f"deepcontext: profiling not started: {e}", file=sys.stderr)

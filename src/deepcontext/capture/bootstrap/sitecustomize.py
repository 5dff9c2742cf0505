"""Started by ``deepcontext record``: profile this interpreter, then run the real
sitecustomize (if any).

The interpreter ``record`` started hands the variables on to the processes it starts (with a
job token), so the ranks of a torchrun or mp.spawn job are profiled too (capture/ranks.py).
Every other interpreter removes them at once: only ranks are profiled among the descendants,
and a rank's own children (spawned DataLoader workers, subprocesses) are left alone. Deciding
that needs only os and json, so an unprofiled child pays no import of deepcontext."""

import json
import os
import sys


def _chain_real_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - like site.py: a failing sitecustomize is not fatal
        print(f"Error in sitecustomize: {e!r}", file=sys.stderr)


def _spawned_by_multiprocessing() -> bool:
    return "--multiprocessing-fork" in getattr(sys, "orig_argv", ())


def _started_alone_by_accelerate(config) -> bool:
    """``accelerate launch --cpu`` runs the program as its one direct child (its simple
    launcher), marked by accelerate's variables and no RANK: that child is the whole job."""
    return "ACCELERATE_MIXED_PRECISION" in os.environ and os.getppid() == config.get("top_pid")


def _when_imported(name, config) -> None:
    """Once ``name`` is imported, let capture/ranks.py watch for the process group; until then
    (and in children that never import it) nothing of deepcontext is imported."""
    import importlib.abc

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            for finder in sys.meta_path:
                spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
                if spec is not None and spec.loader is not None:
                    original = spec.loader.exec_module

                    def exec_module(module):
                        original(module)
                        try:
                            from deepcontext.capture.ranks import start_at_init_process_group

                            start_at_init_process_group(module, config)
                        except Exception as e:  # noqa: BLE001 - the program goes on
                            print(f"deepcontext: profiling not started: {e}", file=sys.stderr)

                    spec.loader.exec_module = exec_module
                    return spec
            return None

    sys.meta_path.insert(0, _Finder())


def _start() -> None:
    raw = os.environ.pop("DEEPCONTEXT_RECORD", None)
    here = os.path.dirname(os.path.abspath(__file__))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)
    if not raw:
        return
    try:
        config = json.loads(raw)
        if "job" not in config:  # the interpreter record started
            from deepcontext.cli._record_child import start_from_config

            start_from_config(raw, here)
        elif os.environ.get("RANK") is not None:  # a rank a launcher started
            from deepcontext.capture.ranks import start_launched_rank

            start_launched_rank(config)
        elif _spawned_by_multiprocessing():  # perhaps an mp.spawn rank: decided at init
            _when_imported("torch.distributed.distributed_c10d", config)
        elif _started_alone_by_accelerate(config):
            from deepcontext.capture.ranks import start_single_worker

            start_single_worker(config)
    except Exception as e:  # noqa: BLE001 - never stop the user's program from starting
        print(f"deepcontext: profiling not started: {e}", file=sys.stderr)


_start()
_chain_real_sitecustomize()

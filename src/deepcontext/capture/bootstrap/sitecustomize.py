"""Started by ``deepcontext record``: profile this interpreter, then run the real
sitecustomize (if any). The variable is removed at once so that child processes are left
alone unless they are profiled deliberately."""

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


def _start() -> None:
    config = os.environ.pop("DEEPCONTEXT_RECORD", None)
    here = os.path.dirname(os.path.abspath(__file__))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != here]
    if parts:
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        os.environ.pop("PYTHONPATH", None)
    if config:
        from deepcontext.cli._record_child import start_from_config

        start_from_config(config)


_start()
_chain_real_sitecustomize()

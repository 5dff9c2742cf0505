"""The PyTorch operator layer, in two tiers.

1. A RecordFunction callback compiled at first use against the installed torch (~0.3 us/op),
   cached under ``$DEEPCONTEXT_CACHE`` (default ``~/.cache/deepcontext``), keyed by everything the
   build depends on (torch, Python, the core's API and the hook's own source and headers), so two
   installs of different deepcontext versions never rebuild each other's hook.
2. Where that cannot be built (no compiler, no ninja), a ``TorchDispatchMode`` feeding the same
   core (~3 us/op; sees aten ops below autograd, so composites such as ``aten::linear`` appear
   as their parts). Set ``DEEPCONTEXT_TORCH_TIER=dispatch`` to force it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Callable

from .native import core

def _hook_sources() -> tuple[Path, list[Path]]:
    """The hook's source and include dirs: installed beside the package, or in a source tree."""
    pkg = Path(__file__).resolve().parent.parent
    installed = pkg / "_torch_hook_src"
    if (installed / "torch_hook.cpp").is_file():
        return installed / "torch_hook.cpp", [installed]
    repo = pkg.parent.parent / "csrc"
    return repo / "torch_hook" / "torch_hook.cpp", [repo / "include" / "deepcontext"]


def cache_dir() -> Path:
    base = os.environ.get("DEEPCONTEXT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "deepcontext")
    return Path(base)


def _hook_name(torch: Any) -> str:
    return extension_name("dc_torch_hook", torch, _sources_digest())


def extension_name(prefix: str, torch: Any, digest: str) -> str:
    """A compiled extension's cache name: everything its build depends on."""
    tag = re.sub(r"[^A-Za-z0-9]", "_", torch.__version__)
    py = f"{sys.version_info.major}{sys.version_info.minor}"
    return f"{prefix}_api{core.API_VERSION}_torch{tag}_py{py}_{digest}"


def _sources_digest() -> str:
    """A digest of the hook's inputs: its source, every header beside it, torch's install path."""
    return sources_digest(*_hook_sources())


def sources_digest(source: Path, includes: list[Path]) -> str:
    """A digest of an extension's source and every header in its include folders."""
    h = hashlib.sha256(source.read_bytes())
    for folder in includes:
        for header in sorted(folder.glob("*.h")):
            h.update(header.name.encode() + b"\0" + header.read_bytes())
    return h.hexdigest()[:12]


def load_compiled_hook(torch: Any, say: Callable[[str], None]) -> Any:
    """Build (once) and import the RecordFunction hook. Raises on any failure."""
    source, includes = _hook_sources()
    return build_extension(torch, _hook_name(torch), source, includes, say,
                           "the PyTorch operator hook")


def build_extension(torch: Any, name: str, source: Path, includes: list[Path],
                    say: Callable[[str], None], what: str, **options: Any) -> Any:
    """Build (once, cached under ``name``) and import a torch extension. Raises on any failure."""
    from torch.utils import cpp_extension

    build = cache_dir() / "torch_hook" / name
    build.mkdir(parents=True, exist_ok=True)
    built = list(build.glob(f"{name}*.so"))
    # Our own flock serializes builds across processes and dies with its holder, so a torch
    # FileBaton "lock" left by a killed build can be removed safely while we hold it.
    with open(build / ".deepcontext.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (build / "lock").unlink(missing_ok=True)
        if not built:
            say(f"deepcontext: compiling {what} for torch {torch.__version__} "
                f"(once per torch version, about 20 s)")
        with contextlib.redirect_stdout(sys.stderr):
            return cpp_extension.load(
                name=name,
                sources=[str(source)],
                extra_include_paths=[str(p) for p in includes],
                extra_cflags=["-O2"],
                build_directory=str(build),
                verbose=False,
                **options,
            )


class _DispatchTier:
    """The no-compiler tier: a TorchDispatchMode that reports each aten op to the core."""

    def __init__(self, torch: Any) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        current_node = torch._C._current_autograd_node
        get_seq = torch.autograd._get_sequence_nr
        is_grad = torch.is_grad_enabled

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
                node = current_node()
                handles = []
                if node is not None:  # inside a backward node: graft under its forward line
                    seq = node._sequence_nr()
                    seq = seq if 0 <= seq < 2**63 else -1  # AccumulateGrad has UINT64_MAX
                    handles.append(core.op_enter(node.name(), seq, True))
                    seq = -1
                else:
                    seq = get_seq() - 1 if is_grad() else -1
                handles.append(core.op_enter(func._schema.name, seq))
                try:
                    return func(*args, **(kwargs or {}))
                finally:
                    for h in reversed(handles):
                        core.op_exit(h)

        self.mode = _Mode()
        self.mode.__enter__()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.mode.__exit__(None, None, None)


_compiled: Any = None


def compiled_hook(torch: Any, say: Callable[[str], None]) -> Any:
    """The compiled hook module, built and imported on first use (raises when it cannot be)."""
    global _compiled
    if _compiled is None:
        _compiled = load_compiled_hook(torch, say)
    return _compiled


class _CompiledTier:
    """Handle of the compiled tier: closing disables the callback until the next session."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def close(self) -> None:
        self.module.uninstall()


def enable(torch: Any, say: Callable[[str], None]) -> tuple[str, Any]:
    """Turn the operator layer on; returns (tier name, handle to close or None)."""
    if os.environ.get("DEEPCONTEXT_TORCH_TIER") != "dispatch":
        try:
            module = compiled_hook(torch, say)
            module.install(core.c_api)
            return "record_function", _CompiledTier(module)
        except Exception as e:  # noqa: BLE001 - any build failure selects the fallback
            reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            say(f"deepcontext: could not build the PyTorch operator hook ({reason[:200]}); "
                f"using the slower TorchDispatchMode tier")
    return "dispatch", _DispatchTier(torch)

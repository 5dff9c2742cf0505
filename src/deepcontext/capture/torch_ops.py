"""The PyTorch operator layer, in two tiers.

1. A RecordFunction callback compiled at first use against the installed torch (~0.3 us/op),
   cached under ``$DEEPCONTEXT_CACHE`` (default ``~/.cache/deepcontext``), keyed by everything the
   build depends on (torch, Python, the core's API and the hook's own source and headers), so two
   installs of different deepcontext versions never rebuild each other's hook. ``record`` builds
   it before the program starts (build_before_start), never inside the program's ``import torch``.
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
import shutil
import subprocess
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


FLAGS_FILE = "deepcontext.cflags"  # beside a cached build: the flags it was made with


def cache_dir() -> Path:
    base = os.environ.get("DEEPCONTEXT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "deepcontext")
    return Path(base)


def _hook_name(torch: Any) -> str:
    return _hook_name_for(str(torch.__version__))


def _hook_name_for(torch_version: str) -> str:
    return extension_name("dc_torch_hook", torch_version, _sources_digest())


def extension_name(prefix: str, torch_version: str, digest: str) -> str:
    """A compiled extension's cache name: everything its build depends on."""
    tag = re.sub(r"[^A-Za-z0-9]", "_", torch_version)
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
    # Our own flock serializes builds across processes and dies with its holder, so a torch
    # FileBaton "lock" left by a killed build can be removed safely while we hold it.
    with open(build / ".deepcontext.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        (build / "lock").unlink(missing_ok=True)
        cflags = _built_with(build, name)
        if cflags is None:
            say(f"deepcontext: compiling {what} for torch {torch.__version__} "
                f"(once per torch version, 20-40 s)")
            cflags = ["-O2", *_fast_call_flags()]
            # (before the .so exists; written whole, so no reader sees it part-written)
            tmp = build / (FLAGS_FILE + ".tmp")
            tmp.write_text(" ".join(cflags))
            os.replace(tmp, build / FLAGS_FILE)
        staged = _staged_sources(build, source, includes)
        with contextlib.redirect_stdout(sys.stderr):
            return cpp_extension.load(
                name=name,
                sources=[str(staged)],
                extra_include_paths=[str(staged.parent)],
                extra_cflags=cflags,
                build_directory=str(build),
                verbose=False,
                **options,
            )


def built_hook_flags(torch: Any) -> list[str] | None:
    """The flags the cached torch hook was built with; None when it is not built (or is to be
    built again). For benchmarks' headers: what a measurement ran. Read without the build lock
    (a header needs no consistent build): the flags file is only ever replaced whole."""
    name = _hook_name(torch)
    return _built_with(cache_dir() / "torch_hook" / name, name)


def _built_with(build: Path, name: str) -> list[str] | None:
    """The flags the cached build in ``build`` was made with, so that loading it never rebuilds
    it (ninja would, for a changed command line); None when it must be built. Read under the
    build lock: the file is written only there, and only before a build. A build from before
    the file existed used -O2 alone. Flags without -O2 are a build to redo: from 53c695b until
    50653bb every load rewrote the file outside the lock, a loader starting beside another (the
    ranks of a job) could read it empty, and it then rebuilt the hook unoptimized for every later
    run (~1,700 instructions and ~190 L1i misses more an operator event,
    cpu-2026-12-05-hook-flags-152a3eb.md)."""
    if not any(build.glob(f"{name}*.so")):
        return None
    flags_file = build / FLAGS_FILE
    if not flags_file.is_file():
        return ["-O2"]
    flags = flags_file.read_text().split()
    return flags if "-O2" in flags else None


def _fast_call_flags() -> list[str]:
    """The flags among these that the compiler takes (x86-64 only: aarch64 uses TLS descriptors
    already, and its PLT differs):

    - ``-mtls-dialect=gnu2``: the hook's thread-locals are read through TLS descriptors, which
      for a library placed in the static TLS block, as a small one nearly always is, cost a few
      instructions where the default dialect calls ``__tls_get_addr`` (~12 calls an operator
      event, ~11 instructions each: benchmarks/results/cpu-2026-12-05-icache-3469891.md);
    - ``-fno-plt``: calls into libtorch go through the GOT, not PLT stubs, each one more line of
      code to fetch (``RecordFunction::name``'s stub alone: ~2.7 L1i misses an event, GPT-2
      generate on the CPU, benchmarks/results/cpu-2026-12-06-calls-22f851e.md)."""
    if os.uname().machine != "x86_64":
        return []
    return [flag for flag in ("-mtls-dialect=gnu2", "-fno-plt") if _compiler_takes(flag)]


def _compiler_takes(flag: str) -> bool:
    try:
        probe = subprocess.run(
            [os.environ.get("CXX", "c++"), flag, "-x", "c++", "-c", "-o", os.devnull, "-"],
            input="", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _staged_sources(build: Path, source: Path, includes: list[Path]) -> Path:
    """An extension's source and headers copied into its build folder (under the build lock), so
    the build's command line names the same files whichever install loads it: torch's build
    regenerates its ninja file from the paths it is given, and two installs (a venv and a
    sanitizer build, say) naming their own copies rebuilt each other's hook on every load. The
    folder's name carries the digest of these files, so the copy is never stale."""
    staged = build / "src"
    if not (staged / source.name).is_file():
        tmp = build / "src.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for header in (h for folder in includes for h in sorted(folder.glob("*.h"))):
            shutil.copyfile(header, tmp / header.name)
        shutil.copyfile(source, tmp / source.name)
        shutil.rmtree(staged, ignore_errors=True)
        tmp.rename(staged)
    return staged / source.name


def _built(name: str) -> bool:
    return any((cache_dir() / "torch_hook" / name).glob(f"{name}*.so"))


def build_before_start(python: str, env: dict[str, str]) -> bool:
    """Build the hook for the program's interpreter before the program starts (``record``), so
    the first-use compile (20-40 s) never runs inside the program's own ``import torch``.

    Returns False only when the build failed (the program should use the dispatch tier and not
    try again); True when it is built, there is no torch, or this cannot be decided here (the
    program then builds it at import, as the API does)."""
    if python == sys.executable:  # the common case, decided without a process or a torch import
        version = _installed_torch()
        if version is None or _built(_hook_name_for(version)):
            return True
    try:
        cache_dir().mkdir(parents=True, exist_ok=True)
    except OSError:
        return True  # the program will say why when it tries
    # In the cache folder, so a module of the program's own named torch is never imported here;
    # stdout to stderr: this process's stdout is about to become the program's.
    try:
        proc = subprocess.run([python, "-c", "from deepcontext.capture.torch_ops import "
                               "_build_main; _build_main()"], cwd=cache_dir(), env=env,
                              stdin=subprocess.DEVNULL, stdout=2, check=False)
    except OSError:
        return True
    return proc.returncode != _BUILD_FAILED


_BUILD_FAILED = 3


def _installed_torch() -> str | None:
    """The installed torch's version from its metadata: no import (which takes seconds)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def _build_main() -> None:
    """``python -c`` entry of build_before_start: exit 0 (built or no torch) or _BUILD_FAILED."""
    version = _installed_torch()
    if version is None or _built(_hook_name_for(version)):
        return
    import torch

    try:
        load_compiled_hook(torch, _say)
    except Exception as e:  # noqa: BLE001 - any build failure selects the fallback
        _say(f"deepcontext: could not build the PyTorch operator hook ({_reason(e)}); "
             f"using the slower TorchDispatchMode tier")
        sys.exit(_BUILD_FAILED)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _reason(e: BaseException) -> str:
    return (str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)[:200]


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

    def pause(self, paused: bool) -> None:
        """The mode stays on the stack (popping it outside its frame would break the program's
        own modes); paused, the core ignores what it reports."""

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
    """Handle of the compiled tier: closing disables the callback until the next session, and so
    does a schedule's pause until capture resumes."""

    def __init__(self, module: Any, nested: bool) -> None:
        self.module = module
        self.nested = nested

    def pause(self, paused: bool) -> None:
        if paused:
            self.module.uninstall()
        else:
            self.module.install(core.c_api, self.nested)

    def close(self) -> None:
        self.module.uninstall()


def enable(torch: Any, say: Callable[[str], None], nested: bool = False,
           note: Callable[[str], None] = lambda _: None) -> tuple[str, Any]:
    """Turn the operator layer on; returns (tier name, handle to close or None). ``nested``:
    record the operators that operators call too (by default only those Python calls)."""
    if os.environ.get("DEEPCONTEXT_TORCH_TIER") != "dispatch":
        try:
            module = compiled_hook(torch, say)
            rebound = module.install(core.c_api, nested)
            if not nested and rebound == 0:
                note("operator layer: operators called by operators are recorded too (the "
                     "dispatcher's callback query could not be rebound in this torch)")
            return "record_function", _CompiledTier(module, nested)
        except Exception as e:  # noqa: BLE001 - any build failure selects the fallback
            say(f"deepcontext: could not build the PyTorch operator hook ({_reason(e)}); "
                f"using the slower TorchDispatchMode tier")
    return "dispatch", _DispatchTier(torch)

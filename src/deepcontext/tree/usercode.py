"""Is a source file the user's own code, or the framework, a library or the standard library?

Findings point at the deepest frame in the user's code: the line the user can change.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from functools import lru_cache
from typing import Any

# Pseudo-files that hold code the user typed (``python -c``, a REPL, a notebook cell).
_USER_PSEUDO = re.compile(r"^<(string|stdin|ipython-input-[^>]*|console)>$")
# Library markers in a path, valid on whatever machine recorded the profile.
_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/deepcontext/capture/",
                  "/deepcontext/monitor/", "/deepcontext/cli/")
# The standard library: <prefix>/lib/python3.X/ (but not a venv's site-packages, caught above).
_STDLIB = re.compile(r"/lib(64)?/python3\.\d+/")
# A source checkout of torch (editable install): torch/<known subpackage or module>.
_TORCH_TREE = re.compile(
    r"/torch/(nn|optim|utils|autograd|_dynamo|_inductor|cuda|distributed|amp|fx|jit|_refs|"
    r"_prims|_decomp|_functorch|_subclasses|_tensor|functional|overrides|_ops|_jit_internal|"
    r"_compile|_meta_registrations|serialization|random|library)\b")


# Code generated at run time: Inductor's and Triton's caches, and modules a library renders
# from a template into a NamedTemporaryFile (torch-geometric's propagate: /tmp/<module>_<8>.py).
_GENERATED_DIRS = ("/torchinductor_", "/.triton/cache/", "/triton/cache/")
_TEMP_MODULE = re.compile(r"^(tmp[a-z0-9_]{8}|[A-Za-z_][\w.]*\.[\w.]*_[a-z0-9_]{8})\.py$")


def torch_subpath(path: str) -> str | None:
    """The part of ``path`` inside the torch package (``nn/functional.py``), or None. torch is
    the ``torch/`` right after site-packages (or, in a source checkout, one of its known
    subpackages): a ``/torch/`` elsewhere in the path (``/opt/torch/.venv/...``: a venv named
    after it) is not torch."""
    norm = path.replace("\\", "/")
    for part in ("/site-packages/", "/dist-packages/"):
        i = norm.rfind(part)
        if i >= 0:
            tail = norm[i + len(part):]
            return tail[len("torch/"):] if tail.startswith("torch/") else None
    m = _TORCH_TREE.search(norm)
    return norm[m.start() + len("/torch/"):] if m else None


def _is_generated(norm: str) -> bool:
    if any(part in norm for part in _GENERATED_DIRS):
        return True
    folder, _, name = norm.rpartition("/")
    return folder in _temp_dirs() and bool(_TEMP_MODULE.match(name))


@lru_cache(maxsize=1)
def _temp_dirs() -> frozenset[str]:
    import tempfile
    return frozenset({"/tmp", "/var/tmp", tempfile.gettempdir().replace("\\", "/").rstrip("/")})


@lru_cache(maxsize=1)
def _local_library_roots() -> tuple[str, ...]:
    """This interpreter's stdlib and site directories (helps when analyzing on the same host)."""
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(path.rstrip("/") + "/")
    roots.add(sys.base_prefix.rstrip("/") + "/lib/")
    return tuple(sorted(roots))


@lru_cache(maxsize=4096)
def is_user_file(path: str) -> bool:
    """True when ``path`` is the program's own source, not torch, site-packages, stdlib,
    code generated at run time (Inductor's output, a library's rendered template in the temp
    directory) or a ``<frozen ...>`` module."""
    if not path:
        return False
    if path.startswith("<"):
        return bool(_USER_PSEUDO.match(path))
    norm = path.replace("\\", "/")
    if any(part in norm for part in _LIBRARY_PARTS):
        return False
    if _STDLIB.search(norm) or _TORCH_TREE.search(norm) or _is_generated(norm):
        return False
    return not norm.startswith(_local_library_roots())


def is_user_frame(frame: Any) -> bool:
    """``is_user_file`` for a frame: code generated at run time (an Inductor wrapper, Triton's
    launcher, tagged ``generated`` when the tree was built) is never the user's."""
    return not frame.get("generated") and is_user_file(frame.file)

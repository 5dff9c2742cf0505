"""``record`` builds the compiled operator hook before the program starts: the first-use build
never runs inside the program's own ``import torch`` (it takes 20-40 s), and a build that
fails is not tried again by the program."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from deepcontext.capture.torch_ops import _hook_name, cache_dir  # noqa: E402
from helpers import loaded, record  # noqa: E402

PROG = "hook_probe.py"
PROBE = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    hook = Path(os.environ["DEEPCONTEXT_CACHE"]) / "torch_hook" / sys.argv[1]
    built = sorted(p.name for p in hook.glob("*.so"))
    print("program starts", file=sys.stderr, flush=True)
    print("hook built before the program:", bool(built))
    import torch
    print(torch.mm(torch.ones(2, 2), torch.ones(2, 2)).sum().item())
""")


@pytest.fixture(scope="module")
def hook_cache(tmp_path_factory):
    """A copy of the hook cache, used by every test here in turn (its path is in the build's
    command lines, so one copy is built in full once and relinked after)."""
    if not any((cache_dir() / "torch_hook" / _hook_name(torch)).glob("*.so")):
        tmp = tmp_path_factory.mktemp("first_build")
        first, _ = record(tmp, "linear_train.py", "1")  # builds the hook once
        assert first.returncode == 0, first.stderr
    cache = tmp_path_factory.mktemp("hook") / "cache"
    shutil.copytree(cache_dir(), cache)
    return cache


@pytest.fixture
def unbuilt_cache(hook_cache):
    """The cache with the built module removed: the next use must link it again."""
    for so in (hook_cache / "torch_hook" / _hook_name(torch)).glob("*.so"):
        so.unlink()
    return hook_cache


def _record_probe(tmp_path, cache, env=None, run="run"):
    where = tmp_path / run
    where.mkdir()
    program = where / PROG
    program.write_text(PROBE)
    return record(where, str(program), _hook_name(torch),
                  env={"DEEPCONTEXT_CACHE": str(cache), **(env or {})}, timeout=300)


def test_the_hook_is_built_before_the_program_starts(tmp_path, unbuilt_cache):
    proc, out = _record_probe(tmp_path, unbuilt_cache)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hook built before the program: True\n8.0\n"
    build_line = (f"deepcontext: compiling the PyTorch operator hook for torch {torch.__version__} "
                  "(once per torch version, 20-40 s)")
    assert proc.stderr.index(build_line) < proc.stderr.index("program starts")
    assert loaded(out).metadata["op_tier"] == "record_function"
    # Built now: the next run neither builds nor says anything about it.
    again, out = _record_probe(tmp_path, unbuilt_cache, run="again")
    assert again.returncode == 0, again.stderr
    assert again.stdout == "hook built before the program: True\n8.0\n"
    assert "compiling" not in again.stderr
    assert loaded(out).metadata["op_tier"] == "record_function"


LOAD = ("import torch, sys; from deepcontext.capture.torch_ops import load_compiled_hook; "
        "load_compiled_hook(torch, print); import deepcontext; print(deepcontext.__file__)")


def test_two_installs_share_the_built_hook_without_rebuilding_it(tmp_path, unbuilt_cache):
    """A venv and a second install of the same version (a sanitizer build, a --target copy)
    load one built hook; neither relinks it for the other."""
    import deepcontext

    second = tmp_path / "second_install"
    shutil.copytree(os.path.dirname(deepcontext.__file__), second / "deepcontext")

    def load(pythonpath):
        env = {**os.environ, "DEEPCONTEXT_CACHE": str(unbuilt_cache)}
        env.pop("PYTHONPATH", None)
        if pythonpath:
            env["PYTHONPATH"] = str(pythonpath)
        proc = subprocess.run([sys.executable, "-c", LOAD], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        (so,) = (unbuilt_cache / "torch_hook" / _hook_name(torch)).glob("*.so")
        return proc.stdout.splitlines()[-1], so.stat().st_mtime_ns

    first_file, built = load(None)
    second_file, after_second = load(second)
    assert second_file == str(second / "deepcontext" / "__init__.py") != first_file
    assert after_second == built
    assert load(None)[1] == built


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="TLS descriptors are aarch64's default")
def test_the_hook_reads_its_tls_variables_through_descriptors(tmp_path, unbuilt_cache):
    # Its query runs for every dispatcher call: __tls_get_addr there was ~12 calls an event.
    from deepcontext.capture.torch_ops import _fast_call_flags
    if "-mtls-dialect=gnu2" not in _fast_call_flags():
        pytest.skip("the C++ compiler does not take -mtls-dialect=gnu2")
    proc, _ = _record_probe(tmp_path, unbuilt_cache)  # (built again, with the flags found now)
    assert proc.returncode == 0, proc.stderr
    build = unbuilt_cache / "torch_hook" / _hook_name(torch)
    assert (build / "deepcontext.cflags").read_text().split() == ["-O2", *_fast_call_flags()]
    (so,) = build.glob("*.so")
    relocations = subprocess.run(["readelf", "-rW", str(so)], capture_output=True, text=True,
                                 check=True).stdout
    assert "R_X86_64_TLSDESC" in relocations
    assert "__tls_get_addr" not in relocations
    if "-fno-plt" in _fast_call_flags():  # (its operator path's calls into libtorch: no PLT stubs)
        slots = [line for line in relocations.splitlines() if "JUMP_SLOT" in line]
        assert not [line for line in slots if "RecordFunction4name" in line], slots


def _load(cache, tmp_path):
    """Loads the hook in a fresh process (building it if need be); what it printed."""
    proc = subprocess.run([sys.executable, "-c", LOAD], cwd=tmp_path, timeout=300,
                          env={**os.environ, "DEEPCONTEXT_CACHE": str(cache)},
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_loading_a_built_hook_leaves_its_build_untouched(tmp_path, unbuilt_cache):
    # Every load used to rewrite the flags file outside the build lock: a loader starting beside
    # another (the ranks of a job) could read it empty and rebuild the hook without -O2.
    _load(unbuilt_cache, tmp_path)
    build = unbuilt_cache / "torch_hook" / _hook_name(torch)

    def made():  # (the lock file is opened for writing by every load)
        return {p.name: p.stat().st_mtime_ns for p in build.iterdir()
                if p.suffix in (".so", ".o", ".cflags", ".tmp")}
    files = made()
    assert sorted(p.rsplit(".", 1)[1] for p in files) == ["cflags", "o", "so"]
    assert "compiling" not in _load(unbuilt_cache, tmp_path)
    assert made() == files


def test_a_hook_built_without_its_flags_is_built_again_with_them(tmp_path, unbuilt_cache):
    # What that race left behind: a built hook whose flags file is empty (built unoptimized).
    from deepcontext.capture.torch_ops import _fast_call_flags
    _load(unbuilt_cache, tmp_path)
    build = unbuilt_cache / "torch_hook" / _hook_name(torch)
    (build / "deepcontext.cflags").write_text("")
    assert "compiling the PyTorch operator hook" in _load(unbuilt_cache, tmp_path)
    flags = ["-O2", *_fast_call_flags()]
    assert (build / "deepcontext.cflags").read_text().split() == flags
    (command,) = [line for line in (build / "build.ninja").read_text().splitlines()
                  if line.startswith("cflags = ")]
    assert command.split()[-len(flags):] == flags
    assert "compiling" not in _load(unbuilt_cache, tmp_path)


def test_a_failed_build_is_reported_once_before_the_program_and_not_retried(tmp_path, unbuilt_cache):
    # Last in this file: the failed build leaves a build file naming the broken compiler.
    proc, out = _record_probe(tmp_path, unbuilt_cache, env={"CXX": "/bin/false"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hook built before the program: False\n8.0\n"
    assert proc.stderr.count("could not build the PyTorch operator hook") == 1
    assert proc.stderr.index("could not build") < proc.stderr.index("program starts")
    assert loaded(out).metadata["op_tier"] == "dispatch"

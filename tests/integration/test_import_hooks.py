"""A hook that runs when the program imports a module must never make that import fail: the
program's own ``import torch`` succeeds whatever our callback does, and the profile says which
layer is off and why."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from helpers import loaded

FAILING_CALLBACK = """
import sys
from deepcontext.capture.import_hooks import when_imported
seen = []
def broken(module):
    raise RuntimeError("hook broke on " + module.__name__)
when_imported("usermod", broken, on_error=lambda e: seen.append(repr(e)))
when_imported("usermod", lambda module: seen.append("second hook ran"))
import usermod
print(usermod.VALUE, seen)
"""


def test_a_failing_callback_leaves_the_import_and_the_other_hooks_alone(tmp_path):
    (tmp_path / "usermod.py").write_text("VALUE = 42\n")
    proc = subprocess.run([sys.executable, "-c", FAILING_CALLBACK], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42 [\"RuntimeError('hook broke on usermod')\", 'second hook ran']\n"
    assert proc.stderr == ""


def test_a_callback_asked_for_by_every_session_runs_once(tmp_path):
    """Each profiling session asks for its hooks again; sessions run before the module's import
    must neither pile up callbacks nor run them once per session."""
    (tmp_path / "usermod.py").write_text("VALUE = 42\n")
    code = ("from deepcontext.capture import import_hooks\n"
            "ran = []\n"
            "def hook(m): ran.append(m.__name__)\n"
            "for _ in range(3): import_hooks.when_imported('usermod', hook)\n"
            "import_hooks.when_imported('usermod', lambda m: ran.append('other'))\n"
            "print(len(import_hooks._waiting['usermod']))\n"
            "import usermod; print(usermod.VALUE, ran)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == "2\n42 ['usermod', 'other']\n"


def test_a_callback_failing_with_no_error_handler_says_one_line(tmp_path):
    (tmp_path / "usermod.py").write_text("VALUE = 42\n")
    code = ("from deepcontext.capture.import_hooks import when_imported\n"
            "when_imported('usermod', lambda m: 1 / 0)\n"
            "import usermod; print(usermod.VALUE)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "42\n"), proc.stderr
    assert proc.stderr == ("deepcontext: the hook on `import usermod` failed (ZeroDivisionError: "
                           "division by zero); that layer is not profiled\n")


def test_record_with_a_torch_the_hook_cannot_use_runs_the_program_unchanged(tmp_path):
    """The program's own module named torch (a stub, a vendored shim): our operator hook cannot
    use it; the program's import and its output are untouched, and the profile says why."""
    (tmp_path / "torch.py").write_text("def ones(n):\n    return [1] * n\n")
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import torch
        print(torch.ones(2))
    """))
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", "p.dcprof", "--",
                           sys.executable, "prog.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "[1, 1]\n"
    assert "Traceback" not in proc.stderr
    notes = loaded(tmp_path / "p.dcprof").metadata["notes"]
    expected = ("operator layer off: the hook on `import torch` failed (ModuleNotFoundError: No "
                "module named 'torch.utils'; 'torch' is not a package); operators are not captured")
    assert expected in notes, json.dumps(notes, indent=1)
    assert "op_tier" not in loaded(tmp_path / "p.dcprof").metadata

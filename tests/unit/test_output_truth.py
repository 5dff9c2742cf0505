"""What the tool prints is true and usable: program names, paste-safe paths, durations, labels
that filter, piped width, the newest profile by default, diff and analyze saying what they
compare. Literal profiles, the real CLI entry point."""

import json
import os
import shlex
import subprocess
import sys

import pytest

from deepcontext.capture.session import paste_safe
from deepcontext.cli._program import describe, program_of, program_stem
from deepcontext.cli.main import main
from deepcontext.tree import CallingContextTree, Frame, save, views
from deepcontext.tree.metrics import format_value

PY = "/usr/bin/python3"


@pytest.mark.parametrize("command, stem", [
    ([PY, "train.py", "--lr", "1"], "train"),
    ([PY, "-u", "examples/train_mlp.py"], "train_mlp"),
    ([PY, "-W", "ignore", "t.py"], "t"),
    ([PY, "-X", "dev", "-m", "pkg.trainer"], "trainer"),
    ([PY, "-c", "import sys; sys.exit(0)"], "python-c"),
    ([PY, "-"], "python"),
    ([PY], "python"),
    (["/usr/local/bin/my-train", "x"], "my-train"),
])
def test_program_stems(command, stem):
    assert program_stem(command) == stem


def test_program_identity_ignores_where_the_script_was_run_from():
    assert describe([PY, "examples/train.py"]) == describe(["python3", "/abs/examples/train.py"]) == "train.py"
    assert program_of([PY, "-c", "pass"]) == ("code", "pass")
    assert describe([PY, "-c", "x" * 50]) == "-c '" + "x" * 37 + "...'"


@pytest.mark.parametrize("name", ["plain.dcprof", "my run.dcprof", "it's.dcprof", "$(rm -rf ~).dcprof",
                                  "new\nline.dcprof", "esc\x1b[31m.dcprof", "bidi\u202e.dcprof"])
def test_paths_are_safe_to_paste(name):
    quoted = paste_safe(name)
    assert quoted.isprintable()
    # bash reads the word back as exactly the name
    out = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True)
    assert out.stdout.decode("utf-8", "surrogateescape") == name
    if name.isprintable():
        assert quoted == shlex.quote(name)


@pytest.mark.parametrize("seconds, text", [
    (1100, "18m 20s"), (59.9, "59.9s"), (60, "1m 00s"), (3725, "1h 02m"), (0.0123, "12.3ms"),
    (7.5e-6, "7.5us"), (0, "0s"),
])
def test_durations_read_like_a_clock(seconds, text):
    assert format_value(seconds, "s") == text


THREAD = Frame.make("thread", "python")
MAIN = Frame.make("python", "main", "/app/train.py", 10)
BLOCK = Frame.make("module", "transformer.h.0.mlp", **{"class": "GPT2MLP"})
MM = Frame.make("op", "aten::mm")


def literal_tree(command=("python", "train.py")) -> CallingContextTree:
    t = CallingContextTree({"command": list(command), "complete": True})
    t.add_metric(t.add_path([MAIN, BLOCK, MM]), "cpu.time", 1100.0)
    t.add_metric(t.add_path([THREAD]), "cpu.time", 500.0)
    return t


@pytest.mark.parametrize("pattern, frame", [
    (r"\[thread\] python", THREAD), (r"\[thread\]", THREAD), (r"\[module\] transformer\.h\.0", BLOCK),
    (r"GPT2MLP", BLOCK), (r"transformer.h.0.mlp  GPT2MLP", BLOCK), (r"\[op\] aten::mm", MM),
    (r"main  /app/train\.py:10", MAIN), (r"train\.py:10", MAIN),
])
def test_labels_that_are_shown_are_labels_that_filter(pattern, frame):
    tree = literal_tree()
    assert {tree.nodes[n].frame for n in views.matching_nodes(tree, pattern)} == {frame}


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)
    return tmp_path


def test_report_without_a_file_reads_the_newest_profile_and_says_so(here, capsys):
    save(literal_tree(), here / "old.dcprof")
    newer = literal_tree(("python", "new.py"))
    save(newer, here / "new.dcprof")
    os.utime(here / "old.dcprof", (1, 1))
    assert main(["report"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "deepcontext: report new.dcprof (the newest profile here)\n"
    assert cap.out.splitlines()[0] == "command: python new.py"


def test_piped_report_is_not_wrapped_and_durations_are_human(here, capsys):
    long_file = "/app/" + "very_long_directory_name/" * 8 + "train.py"
    t = CallingContextTree({"command": ["python", "train.py"]})
    t.add_metric(t.add_path([Frame.make("python", "main", long_file, 3), MM]), "cpu.time", 1100.0)
    save(t, here / "p.dcprof")
    assert main(["report", "p.dcprof"]) == 0  # capsys: not a terminal
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["command: python train.py",
                     "top-down  total cpu.time = 18m 20s",
                     f"└── 100.0%   18m 20s main  {long_file}:3",
                     "    └── 100.0%   18m 20s [op] aten::mm"]


def test_report_paths_are_relative_to_the_working_directory(here, capsys):
    t = CallingContextTree({})
    t.add_metric(t.add_path([Frame.make("python", "main", str(here / "src" / "train.py"), 3)]),
                 "cpu.time", 1.0)
    save(t, here / "p.dcprof")
    assert main(["report", "p.dcprof"]) == 0
    assert "main  src/train.py:3" in capsys.readouterr().out


def test_report_shows_module_frames_with_their_class(here, capsys):
    save(literal_tree(), here / "p.dcprof")
    assert main(["report", "p.dcprof", "--include", r"\[module\]"]) == 0
    out = capsys.readouterr().out
    assert "[module] transformer.h.0.mlp  GPT2MLP" in out
    assert "[thread]" not in out


def test_diff_warns_when_the_profiles_are_different_programs(here, capsys):
    save(literal_tree(("python", "train.py")), here / "a.dcprof")
    save(literal_tree(("python", "/elsewhere/train.py", "--fast")), here / "b.dcprof")
    save(literal_tree(("python", "-c", "print(1)")), here / "c.dcprof")
    assert main(["diff", "a.dcprof", "b.dcprof"]) == 0
    assert "warning" not in capsys.readouterr().out
    assert main(["diff", "a.dcprof", "c.dcprof"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (
        "warning: the profiles are of different programs (train.py and -c 'print(1)'); only the "
        "contexts they share are compared")
    assert main(["diff", "a.dcprof", "c.dcprof", "--format", "json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["programs"] == {"before": "train.py", "after": "-c 'print(1)'",
                                               "same": False}
    assert cap.err.startswith("deepcontext: warning: the profiles are of different programs")


def test_analyze_names_the_metric_its_shares_are_of(here, capsys):
    t = CallingContextTree({"command": ["python", "train.py"]})
    leaf = t.add_path([MAIN, MM])
    t.add_metric(leaf, "cpu.time", 2.0)
    t.add_metric(leaf, "op.time", 3.0)
    t.add_metric(leaf, "op.count", 10)
    save(t, here / "p.dcprof")
    assert main(["analyze", "p.dcprof"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith("shares are of 3s op.time outside imports (also measured: cpu.time 2s)")
    assert main(["analyze", "p.dcprof", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["profiled_metric"] == "op.time"


def test_record_refuses_an_output_path_it_cannot_create_before_running(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", "/proc/x.dcprof",
                           "--", sys.executable, "-c", "print('ran')"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    # root passes access(); the real open says no (non-root: permission denied)
    assert proc.stderr.startswith("deepcontext: error: cannot write /proc/x.dcprof: ")
    assert proc.stderr.count("\n") == 1


def test_exports_name_module_frames_with_their_class(here):
    from deepcontext.render.exporters._common import display_name

    assert display_name(BLOCK) == "transformer.h.0.mlp (GPT2MLP)"
    root = Frame.make("module", "GPT2LMHeadModel", **{"class": "GPT2LMHeadModel"})
    assert display_name(root) == "GPT2LMHeadModel"
    save(literal_tree(), here / "p.dcprof")
    assert main(["export", "p.dcprof", "-o", "p.folded"]) == 0
    assert sorted((here / "p.folded").read_text().splitlines()) == [
        "[thread] python 500000000000",
        "main (/app/train.py:10);transformer.h.0.mlp (GPT2MLP);aten::mm 1100000000000",
    ]

"""Names come from the profiled program: in the terminal report they are inert (no escape
sequence, no markup, no reordering reaches the terminal), in JSON they are exact and ASCII."""

from __future__ import annotations

import json
import re

import pytest
from reliability_harness import CLI, PY, frame_names, record, report_json, run_child, write_program

HOSTILE = {
    "script": "</script><img src=x onerror=alert(1)>",
    "ansi": "red\x1b[31mALERT\x1b[0m\x1b[2J",
    "osc": "title\x1b]0;pwned\x07bell",
    "markup": "[bold red]markup[/bold red][link=http://evil]x[/link]",
    "quotes": "q'\"`${x}&amp;",
    "bidi": "abc\u202egnp.exe\u2066x\u2069",
    "controls": "cr\rlf\nnul\x00tab\tdel\x7fc1\x9b",
    "separator": "line\u2028para\u2029end",
    "emoji_code": ":smile: :warning:",
}
LONG_NAME = "long_" + "x" * 100_000
BAD_IN_TERMINAL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")

PROGRAM = '''
import sys, time, importlib.util
HOSTILE = {hostile!r}
LONG_NAME = {long!r}

def work(seconds=0.1):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def named(name):
    def f():
        work()
    f.__code__ = f.__code__.replace(co_name=name, co_qualname=name)
    return f

# Keep every function alive: see test_capture_identity.py for why this matters today.
held = [named(name) for name in [*HOSTILE.values(), LONG_NAME, "surrogate\\udcff\\ud800end"]]
for f in held:
    f()

spec = importlib.util.spec_from_file_location("hostile_module", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.in_hostile_file()
'''

HOSTILE_FILE_NAME = "evil\x1b[31m<script>'\"[bold]\u202e\nname.py"


@pytest.fixture(scope="module")
def hostile_profile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    module = tmp / HOSTILE_FILE_NAME
    module.write_text("import time\n\ndef in_hostile_file():\n    end = time.process_time() + 0.05\n"
                      "    while time.process_time() < end:\n        pass\n")
    r = record(tmp, PROGRAM.format(hostile=HOSTILE, long=LONG_NAME), program_args=[str(module)])
    assert r.rc == 0, r.describe()
    assert "cannot write" not in r.err, r.describe()
    return tmp, tmp / "prof.dcprof"


def _assert_inert(text: str) -> None:
    bad = sorted({hex(ord(c)) for c in BAD_IN_TERMINAL.findall(text)})
    assert not bad, f"raw control/reordering characters reached the terminal: {bad}"


@pytest.mark.parametrize("view", [[], ["--inverted"], ["--flat"], ["--threshold", "0"]])
def test_terminal_report_is_inert(hostile_profile, view):
    tmp, prof = hostile_profile
    r = run_child([*CLI, "report", str(prof), *view], cwd=tmp)
    assert r.rc == 0, r.describe()
    _assert_inert(r.out)
    if view != ["--flat"]:
        assert "[bold red]markup[/bold red]" in r.out  # shown literally, not interpreted
        assert "</script><img src=x onerror=alert(1)>" in r.out
        assert ":smile: :warning:" in r.out  # no emoji substitution
        assert "\\x1b[31mALERT" in r.out and "\\u202egnp.exe" in r.out
    assert max(len(line) for line in r.out.splitlines()) < 1000


@pytest.mark.parametrize("command", [["analyze", "{prof}"], ["diff", "{plain}", "{prof}"]])
def test_other_terminal_outputs_are_inert(hostile_profile, command):
    tmp, prof = hostile_profile
    if run_child([*CLI, command[0], "--help"], cwd=tmp).rc != 0:
        pytest.skip(f"deepcontext {command[0]} is not available")
    plain = tmp / "plain.dcprof"
    if not plain.exists():  # a profile without the hostile names: diff shows them all as new
        r = record(tmp, "print('plain')", output=plain.name, name="plain.py")
        assert r.rc == 0, r.describe()
    argv = [*CLI, command[0], *[a.format(prof=prof, plain=plain) for a in command[1:]],
            "--threshold", "0"] if command[0] == "diff" else [*CLI, command[0], str(prof)]
    r = run_child(argv, cwd=tmp)
    assert r.rc in (0, 1) and "Traceback" not in r.err, r.describe()
    _assert_inert(r.out)
    _assert_inert(r.err)


def test_json_report_keeps_names_exact_and_ascii(hostile_profile):
    tmp, prof = hostile_profile
    r = run_child([*CLI, "report", str(prof), "--format", "json"], cwd=tmp)
    assert r.rc == 0, r.describe()
    assert r.out.isascii()
    names = frame_names(json.loads(r.out))
    for key, name in HOSTILE.items():
        if key == "controls":  # the capture core stores C strings: NUL ends the name
            assert any(n.startswith("cr\rlf\nnul") for n in names), key
        else:
            assert name in names, key
    # The capture core bounds a name's length; what it keeps is an exact prefix.
    assert any(n.startswith("long_xxxx") and LONG_NAME.startswith(n) for n in names)
    assert any(n.startswith("surrogate") and n.endswith("end") for n in names)
    files = set()
    stack = [json.loads(r.out)["tree"]]
    while stack:
        node = stack.pop()
        files.add(node["frame"].get("file", ""))
        stack.extend(node["children"])
    assert any(f.endswith(HOSTILE_FILE_NAME) for f in files), files


def test_literal_tree_with_hostile_names_saves_and_renders(tmp_path):
    # Through the API, names can hold anything, lone surrogates included: never a failed write.
    source = f'''
from deepcontext.tree import CallingContextTree, Frame
from deepcontext.tree.profile_file import save
HOSTILE = {HOSTILE!r}
tree = CallingContextTree({{"command": ["train.py", "--tag=\\udcff\\x1b[2J"], "notes": ["\\x1b]0;x\\x07"]}})
for i, (key, name) in enumerate(sorted(HOSTILE.items())):
    op = tree.add_path([Frame.make("python", name, "/w/" + name + ".py", i + 1),
                        Frame.make("op", "aten::" + name),
                        Frame.make("kernel", name + "<<<grid>>>", stream="\\x1b[1m7")])
    tree.add_metric(op, "gpu.time", 0.01 * (i + 1))
leaf = tree.add_path([Frame.make("python", "lone\\ud800surrogate", "/w/\\udcffbad.py", 1)])
tree.add_metric(leaf, "gpu.time", 0.5)
long = tree.add_path([Frame.make("python", {LONG_NAME!r}, "/w/long.py", 1)])
tree.add_metric(long, "gpu.time", 0.5)
save(tree, "lit.dcprof")
'''
    prog = write_program(tmp_path, source, "make_tree.py")
    r = run_child([PY, str(prog)], cwd=tmp_path)
    assert r.rc == 0, r.describe()
    text = run_child([*CLI, "report", "lit.dcprof", "--threshold", "0"], cwd=tmp_path)
    assert text.rc == 0, text.describe()
    _assert_inert(text.out)
    assert "lone\\ud800surrogate" in text.out
    assert " ... " in text.out and max(len(x) for x in text.out.splitlines()) < 1000
    doc = report_json(tmp_path, tmp_path / "lit.dcprof")
    names = frame_names(doc)
    for name in HOSTILE.values():
        assert name + "<<<grid>>>" in names and "aten::" + name in names
    assert LONG_NAME in names  # JSON is exact, whatever the length


def test_error_messages_quoting_hostile_file_names_stay_one_inert_line(tmp_path):
    from reliability_harness import assert_one_line_error

    for name in ("missing\x1b[2J\nname.dcprof", "bad\x1b]0;x\x07\u202e.dcprof"):
        path = tmp_path / name
        if "bad" in name:
            path.write_bytes(b"not a profile\n")
        r = run_child([*CLI, "report", str(path)], cwd=tmp_path)
        assert_one_line_error(r)
        _assert_inert(r.err)


@pytest.mark.parametrize("fmt", ["folded", "speedscope", "trace", "hatchet", "pprof"])
def test_exports_stay_well_formed_with_hostile_names(hostile_profile, fmt):
    tmp, prof = hostile_profile
    if run_child([*CLI, "export", "--help"], cwd=tmp).rc != 0:
        pytest.skip("deepcontext export is not available")
    out = tmp / f"hostile.{fmt}"
    r = run_child([*CLI, "export", str(prof), "--format", fmt, "-o", str(out), "-f"], cwd=tmp)
    assert r.rc == 0, r.describe()
    data = out.read_bytes()
    if fmt == "folded":  # one "frame;frame;... COUNT" per line: a name cannot add lines
        lines = [x for x in data.decode("utf-8").split("\n") if x]  # the format splits on \n only
        assert lines and all(line.rsplit(" ", 1)[-1].isdigit() for line in lines), lines[:5]
        assert not any("\x1b" in line for line in lines)
    elif fmt != "pprof":
        assert data.isascii()
        json.loads(data)


@pytest.mark.parametrize("fmt", ["sarif", "json"])
def test_analyzer_machine_outputs_are_valid_json_with_hostile_names(hostile_profile, fmt):
    tmp, prof = hostile_profile
    if run_child([*CLI, "analyze", "--help"], cwd=tmp).rc != 0:
        pytest.skip("deepcontext analyze is not available")
    r = run_child([*CLI, "analyze", str(prof), "--format", fmt], cwd=tmp)
    assert r.rc in (0, 1), r.describe()
    json.loads(r.out)  # strict: a raw control character would fail here

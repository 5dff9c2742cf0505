"""``deepcontext merge`` on literal profiles."""

from deepcontext.cli.main import main
from deepcontext.tree import CallingContextTree, Frame, load, save

STEP = Frame.make("python", "step", "/app/train.py", 4)
MM = Frame.make("op", "aten::mm")


def profile(path, value, complete=True):
    t = CallingContextTree({"complete": complete, "notes": [f"rank note {value}"]})
    t.add_metric(t.add_path([STEP, MM]), "gpu.time", value)
    save(t, path)
    return path


def test_merge_adds_equal_contexts(tmp_path, capsys):
    a, b = profile(tmp_path / "r0.dcprof", 1.0), profile(tmp_path / "r1.dcprof", 2.5, False)
    assert main(["merge", str(a), str(b), "-o", str(tmp_path / "all.dcprof")]) == 0
    merged = load(tmp_path / "all.dcprof")
    merged.self_check()
    assert merged.exclusive(merged.add_path([STEP, MM]), "gpu.time") == 3.5
    assert merged.metadata["complete"] is False
    assert merged.metadata["merged_from"] == [str(a), str(b)]
    assert "merged 2 profiles" in capsys.readouterr().out


def test_merge_refuses_to_overwrite_an_input_or_existing_file(tmp_path, capsys):
    a, b = profile(tmp_path / "r0.dcprof", 1.0), profile(tmp_path / "r1.dcprof", 2.0)
    assert main(["merge", str(a), str(b), "-o", str(b), "-f"]) == 2
    assert "is also an input" in capsys.readouterr().err
    assert main(["merge", str(a), str(b), "-o", str(a)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert load(a).total("gpu.time") == 1.0

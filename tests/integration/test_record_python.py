"""``deepcontext record`` on pure Python: CPU time on the right line, output and exit code untouched."""

import subprocess
import sys

from helpers import PROGRAMS, line_of, loaded, python_nodes, record


def test_hot_loop_cpu_time_lands_on_its_lines(tmp_path):
    proc, out = record(tmp_path, "hot_loop.py", options=("--sample-interval", "0.002"))
    assert proc.returncode == 0, proc.stderr
    tree = loaded(out)
    total = tree.total("cpu.time")
    assert total > 0.1
    spin_lines = {line_of("hot_loop.py", "SPIN")} | {line_of("hot_loop.py", "SPIN") + 1}
    on_spin = sum(tree.inclusive(n.id, "cpu.time") for n in tree.nodes
                  if n.frame.kind == "python" and n.frame.name == "spin" and n.frame.line in spin_lines)
    assert on_spin / total > 0.8
    # the path is <module> -> spin, with the profiler's own frames hidden
    spin = [n for n in tree.nodes if n.frame.name == "spin"]
    assert all(tree.path(n.id)[0].name == "<module>" for n in spin)
    assert not any("deepcontext" in n.frame.file for n in tree.nodes)


def test_stdin_stdout_stderr_and_exit_code_pass_through(tmp_path):
    proc, out = record(tmp_path, "passthrough.py", "3", stdin="hello\n")
    assert proc.returncode == 3
    assert proc.stdout == "stdout:HELLO\n"
    assert "stderr-line\n" in proc.stderr
    assert loaded(out).metadata["complete"] is True


def test_default_output_name_never_overwrites(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('hi')\n")
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--", sys.executable,
                               "job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in tmp_path.glob("*.dcprof"))
    assert names == ["job.1.dcprof", "job.2.dcprof", "job.dcprof"]


def test_python_dash_m_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import sys\nprint('module', sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--", sys.executable, "-m",
                           "mypkg.train", "a", "b"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "module ['a', 'b']\n"
    assert (tmp_path / "train.dcprof").exists()


def test_missing_script_is_refused_before_running(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--", sys.executable,
                           "nope.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "deepcontext: error: script not found: nope.py"
    assert not list(tmp_path.iterdir())


def test_programs_dir_exists():
    assert (PROGRAMS / "hot_loop.py").is_file()


def test_console_script_entry_point(tmp_path):
    """A console script (an executable with a Python shebang) is profiled like `python x.py`."""
    script = tmp_path / "train-entry"
    script.write_text(f"#!{sys.executable}\nimport sys\n\ndef main():\n    print('entry', sys.argv[1:])\n\n"
                      "main()\n")
    script.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--", str(script), "--epochs",
                           "1"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "entry ['--epochs', '1']\n"
    tree = loaded(tmp_path / "train-entry.dcprof")
    assert tree.metadata["complete"] is True
    assert tree.metadata["command"] == [str(script), "--epochs", "1"]

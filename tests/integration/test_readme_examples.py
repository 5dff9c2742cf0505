"""The README's example output is the tool's real output: its example is re-run and compared.

Sampled times differ from run to run, so numbers are masked; everything else must match
exactly: the commands' messages, the header, and every line of the tree holding at least
``STABLE_SHARE`` of the run (its depth and its label) must be a line of a fresh report of a fresh
run. Smaller lines hold a handful of CPU samples (a 3 s run at 10 ms a sample), so a fresh run
may give them none; they are still checked to be lines of the real tree's shape, not made up.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("readme_examples", ROOT / "scripts" / "readme_examples.py")
readme_examples = importlib.util.module_from_spec(spec)
spec.loader.exec_module(readme_examples)

TREE_LINE = re.compile(r"^(?P<guide>[│├└─ ]*?)\s*(?P<share>\d+\.\d)% (?P<value>.{9}) (\(self [^)]*\) )?(?P<label>.*)$")
STABLE_SHARE = 5.0  # percent of the run
NUMBER = re.compile(r"\d+(\.\d+)?(e[+-]\d+)?")


def split(output: str, min_share: float = 0.0) -> tuple[list[str], set[tuple[int, str]]]:
    """Other lines (numbers masked) and the tree's (depth, label) pairs of lines holding at least
    ``min_share`` percent."""
    other, tree = [], set()
    for line in output.splitlines():
        m = TREE_LINE.match(line)
        if m:
            if float(m.group("share")) >= min_share:
                tree.add((len(m.group("guide")) // 4, m.group("label")))
        else:
            other.append(NUMBER.sub("N", line))
    return other, tree


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    work = readme_examples.scratch()
    try:
        out = readme_examples.run_example(readme_examples.EXAMPLES["quickstart"], work)
        env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # unwrapped, as piped
        full = subprocess.run([sys.executable, "-m", "deepcontext", "report", "train_mlp.dcprof",
                               "--depth", "6", "--threshold", "0"], cwd=work, text=True,
                              capture_output=True, check=True, env=env).stdout
        yield out, full
    finally:
        import shutil

        shutil.rmtree(work, ignore_errors=True)


def test_the_readme_has_every_example():
    blocks = readme_examples.readme_blocks((ROOT / "README.md").read_text())
    assert set(blocks) == set(readme_examples.EXAMPLES)
    for name, command in readme_examples.EXAMPLES.items():
        assert blocks[name].startswith(f"$ {command}\n")


def test_the_quickstart_is_real_output(fresh):
    out, full = fresh
    shown = readme_examples.readme_blocks((ROOT / "README.md").read_text())["quickstart"]
    shown_other, shown_tree = split(shown, STABLE_SHARE)
    fresh_other, _ = split(out)
    _, full_tree = split(full)
    assert shown_other == fresh_other
    assert len(shown_tree) >= 8
    assert shown_tree <= full_tree, sorted(shown_tree - full_tree)

"""Regenerate the README's example output from real runs of the tool.

Each example in README.md sits between ``<!-- example: NAME -->`` and ``<!-- end example -->``;
this script runs its commands (in a scratch directory holding a copy of ``examples/``, with
``python`` and ``deepcontext`` from this interpreter on PATH) and writes what the terminal
showed back into the README. ``tests/unit/test_readme_examples.py`` checks that the README still
matches what the tool prints.

    python scripts/readme_examples.py            # rewrite README.md
    python scripts/readme_examples.py --print    # show the fresh output only
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: example name -> the shell command line it shows
EXAMPLES = {
    "quickstart": "deepcontext record -- python examples/train_mlp.py && deepcontext report --depth 6",
}

BLOCK = re.compile(r"(<!-- example: (?P<name>[\w-]+) -->\n```\n)(?P<body>.*?)(```\n<!-- end example -->)",
                   re.S)


def run_example(command: str, workdir: Path) -> str:
    """``$ command`` and everything the terminal showed (stdout and stderr, in order)."""
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("COLUMNS", None)
    proc = subprocess.run(["bash", "-c", command], cwd=workdir, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"example failed ({proc.returncode}): {command}\n{proc.stdout}")
    return f"$ {command}\n{proc.stdout}"


def scratch() -> Path:
    work = Path(tempfile.mkdtemp(prefix="dc-readme-"))
    shutil.copytree(ROOT / "examples", work / "examples")
    return work


def fresh_outputs() -> dict[str, str]:
    work = scratch()
    try:
        return {name: run_example(cmd, work) for name, cmd in EXAMPLES.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def readme_blocks(text: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--print", action="store_true", help="print the fresh output, change nothing")
    args = p.parse_args()
    outputs = fresh_outputs()
    if args.print:
        for name, out in outputs.items():
            print(f"== {name}\n{out}")
        return 0
    text = README.read_text()
    missing = set(EXAMPLES) - set(readme_blocks(text))
    if missing:
        raise SystemExit(f"README.md has no block for: {', '.join(sorted(missing))}")
    text = BLOCK.sub(lambda m: m.group(1) + outputs[m.group("name")] + m.group(4), text)
    README.write_text(text)
    print(f"rewrote {len(outputs)} example(s) in {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

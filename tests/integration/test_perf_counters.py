"""--perf: software counters read at the CPU-time sampler's samples land on the lines that
caused them, between bounds the kernel itself sets; absent hardware events are a note."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import line_of, loaded, python_nodes, record

PROG = "perf_counters.py"
PAGES, SLEEPS = 2000, 50


def on_line(tree, marker, metric):
    return sum(tree.inclusive(n, metric) for n in python_nodes(tree, PROG, line_of(PROG, marker)))


def test_page_faults_and_context_switches_per_line(tmp_path):
    proc, out = record(tmp_path, PROG, str(PAGES), str(SLEEPS),
                       options=("--perf", "--sample-interval", "0.005"))
    assert proc.returncode == 0, proc.stderr
    u = json.loads(proc.stdout)
    tree = loaded(out)
    # TOUCH writes PAGES fresh 4 KiB pages: each is a fault. The line's samples hold every count
    # since the last sample of the quiet line before it, so the same kernel counter, read by the
    # program from that line's start to this line's end, bounds them from above (getrusage's
    # count may be lower: it counts a retried fault once).
    faults = on_line(tree, "TOUCH", "perf.page_faults")
    perf_touch = u["touch_end"]["perf_faults"] - u["before_touch"]["perf_faults"]
    assert PAGES <= faults <= perf_touch
    # SLEEP sleeps SLEEPS times: at least that many voluntary switches (one per sleep).
    switches = on_line(tree, "SLEEP", "perf.context_switches")
    assert u["sleep_end"]["voluntary"] - u["sleep_start"]["voluntary"] >= SLEEPS
    perf_sleep = u["sleep_end"]["perf_switches"] - u["before_sleep"]["perf_switches"]
    assert SLEEPS <= switches <= perf_sleep
    # Hardware events: counted where the kernel offers them, else one note says so.
    notes = [n for n in tree.metadata["notes"] if n.startswith("perf counters:")]
    if tree.total("perf.cycles") > 0:
        assert not any("hardware events unavailable" in n for n in notes)
        assert on_line(tree, "TOUCH", "perf.instructions") > 0
    else:
        assert len([n for n in notes if "hardware events unavailable" in n]) == 1
    assert tree.metadata["perf"] is True


def test_perf_needs_the_sampler(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('ran')\n")
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "--perf",
                           "--sample-interval", "0", "--", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and "--sample-interval" in proc.stderr

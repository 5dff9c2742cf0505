"""Frames are attributed to the code that ran, even when code objects come and go (exec,
generated code, lambdas in loops): a freed code object's address is soon reused."""

from __future__ import annotations

from reliability_harness import frame_names, record, report_json

PROGRAM = '''
import sys, time
def work(seconds=0.1):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
def named(name):
    def f():
        work()
    f.__code__ = f.__code__.replace(co_name=name, co_qualname=name)
    return f
held = []
for i in range(8):
    fn = named(f"generated_{i}")
    fn()
    if sys.argv[1] == "keep":
        held.append(fn)
    del fn
'''


def _names(tmp_path, mode):
    r = record(tmp_path, PROGRAM, program_args=[mode], output=f"{mode}.dcprof")
    assert r.rc == 0, r.describe()
    return {n for n in frame_names(report_json(tmp_path, tmp_path / f"{mode}.dcprof"))
            if n.startswith("generated_")}


def test_live_generated_functions_each_get_their_own_frame(tmp_path):
    assert _names(tmp_path, "keep") == {f"generated_{i}" for i in range(8)}


def test_freed_generated_functions_each_get_their_own_frame(tmp_path):
    # A freed code object's address, and its name objects' addresses, are reused by the next
    # one; the key also holds the cached hashes of its file and qualified name.
    assert _names(tmp_path, "drop") == {f"generated_{i}" for i in range(8)}

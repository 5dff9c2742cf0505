"""The splice rule on synthetic stacks: real addresses of each class (eval loop, other
interpreter code, a whitelisted interpreter function, a foreign library, DeepContext itself)
and Python frames given only by their entry bits. Stacks are innermost first; results are
outermost first."""

from __future__ import annotations

import ctypes

import pytest


def _addr(fn) -> int:
    # +8: inside the function, as a return address would be (the splice looks at ip-1).
    return ctypes.cast(fn, ctypes.c_void_p).value + 8


@pytest.fixture(scope="module")
def a(core, chain_ext):
    class A:
        E = _addr(ctypes.pythonapi._PyEval_EvalFrameDefault)  # eval loop
        I = _addr(ctypes.pythonapi.PyObject_Call)              # interpreter, dropped
        K = _addr(ctypes.pythonapi.PyGILState_Ensure)          # interpreter, kept
        lib = ctypes.CDLL(chain_ext.__file__)
        N1, N2, N3 = (_addr(lib.dcn_chain_a), _addr(lib.dcn_chain_b), _addr(lib.dcn_chain_c))
        S = _addr(ctypes.CDLL(core.__file__).PyInit__core)     # DeepContext's own object
    return A


def run(core, ips, entries, **kw):
    status, items = core.native_splice(ips, [bool(e) for e in entries], **kw)
    return status, [("py", v) if k == "python" else v for k, v in items]


def test_address_classes(core, a):
    assert core.native_is_eval_frame(a.E)
    assert not core.native_is_eval_frame(a.I)
    assert not core.native_is_eval_frame(a.N1)


def test_one_python_frame_per_eval_frame(core, a):
    # 3.10 style: every frame is an entry frame.
    assert run(core, [a.N1, a.E, a.N2, a.E], [1, 1]) == ("exact", [("py", 1), a.N2, ("py", 0), a.N1])


def test_eval_frame_runs_frames_up_to_the_entry_frame(core, a):
    # 3.11+: frames 0-2 run in the inner eval frame (2 is its entry), 3-4 in the outer one.
    assert run(core, [a.N1, a.E, a.N2, a.E], [0, 0, 1, 0, 1]) == (
        "exact", [("py", 4), ("py", 3), a.N2, ("py", 2), ("py", 1), ("py", 0), a.N1])


def test_interpreter_frames_dropped_whitelist_kept(core, a):
    assert run(core, [a.K, a.I, a.N1, a.I, a.E], [1]) == ("exact", [("py", 0), a.N1, a.K])


def test_own_frames_dropped(core, a):
    assert run(core, [a.S, a.S, a.N1, a.E], [1]) == ("exact", [("py", 0), a.N1])


def test_registered_objects_are_hidden_too(core, a, chain_ext, tmp_path):
    # A second copy of the extension stands in for another DeepContext library (the torch hook).
    import shutil
    copy = tmp_path / ("hidden_" + chain_ext.__file__.rsplit("/", 1)[1])
    shutil.copy(chain_ext.__file__, copy)
    lib = ctypes.CDLL(str(copy))
    h = _addr(lib.dcn_chain_a)
    assert run(core, [h, a.N1, a.E], [1]) == ("exact", [("py", 0), a.N1, h])
    core.native_add_self_object(h)
    assert run(core, [h, a.N1, a.E], [1]) == ("exact", [("py", 0), a.N1])


def test_frames_outside_the_outermost_eval_frame(core, a):
    ips, entries = [a.N1, a.E, a.N2, a.N3], [1]
    assert run(core, ips, entries) == ("exact", [("py", 0), a.N1])
    assert run(core, ips, entries, keep_outer=True) == ("exact", [a.N3, a.N2, ("py", 0), a.N1])


def test_eval_frame_entered_before_its_python_frame(core, a):
    # The innermost eval frame has no Python frame yet: pairing from the outermost drops it.
    assert run(core, [a.N1, a.E, a.I, a.E, a.N2, a.E], [1, 1]) == (
        "off_by_one", [("py", 1), a.N2, ("py", 0), a.N1])


def test_python_frames_without_their_eval_frame(core, a):
    # 3.10-3.13 link a frame inside the eval function, so a run of Python frames without its
    # eval frame means the unwind stopped early: pairing would be a guess.
    assert run(core, [a.N1, a.E], [1, 1]) == ("mismatch", [("py", 1), ("py", 0)])


def test_disagreement_falls_back_to_pure_python(core, a):
    assert run(core, [a.N1, a.E], [1, 1, 1]) == ("mismatch", [("py", 2), ("py", 1), ("py", 0)])
    # No eval frame at all (unwinding stopped early, or an unrecognised interpreter).
    assert run(core, [a.N1, a.N2], [0, 1]) == ("mismatch", [("py", 1), ("py", 0)])


def test_truncated_native_stack_pairs_from_the_innermost(core, a):
    ips, entries = [a.N1, a.E, a.N2, a.E], [1, 1, 1, 1]
    assert run(core, ips, entries)[0] == "mismatch"
    assert run(core, ips, entries, native_truncated=True) == (
        "truncated", [("py", 3), ("py", 2), ("py", 1), a.N2, ("py", 0), a.N1])


def test_truncated_python_stack_drops_outer_eval_frames(core, a):
    ips, entries = [a.N1, a.E, a.N2, a.E, a.N3, a.E, a.E], [1, 1]
    assert run(core, ips, entries, python_truncated=True) == (
        "truncated", [a.N3, ("py", 1), a.N2, ("py", 0), a.N1])


def test_no_python_frames_keeps_native_frames(core, a):
    assert run(core, [a.N1, a.I, a.N2, a.S], []) == ("no_python", [a.N2, a.N1])
    # Eval frames but no Python frame at all: the walk was cut short.
    assert run(core, [a.N1, a.E, a.E], []) == ("mismatch", [])

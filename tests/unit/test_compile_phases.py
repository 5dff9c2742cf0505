"""Which library frames open a compilation marker (capture/inductor/placement.py): Dynamo's
frame callback skipping a frame at run time is not a compilation; its _compile is."""

from deepcontext.capture.inductor.placement import PHASES, _phase
from deepcontext.tree.frame import Frame

DYNAMO = "/usr/lib/python3/site-packages/torch/_dynamo/convert_frame.py"


def py(name: str, file: str) -> Frame:
    return Frame.make("python", name, file, 1)


def test_dynamo_callback_skipping_a_frame_opens_no_compilation():
    for name in ("CatchErrorsWrapper.__call__", "ConvertFrameAssert.__call__",
                 "ConvertFrame.__call__", "first_real_inst_idx"):
        assert _phase(py(name, DYNAMO)) == (PHASES.index("dynamo"), False), name


def test_dynamo_compile_opens_one():
    for name in ("_compile", "_compile.<locals>.compile_inner", "_compile.<locals>._compile_inner"):
        assert _phase(py(name, DYNAMO)) == (PHASES.index("dynamo"), True), name


def test_other_phases_and_plain_frames():
    aot = "/x/torch/_functorch/_aot_autograd/runtime_wrappers.py"
    assert _phase(py("_AutogradBackwardCompiler.get_or_compile", aot)) == (1, True)
    assert _phase(py("runtime_wrapper", aot)) == (1, False)
    assert _phase(py("compile_fx_inner", "/x/torch/_inductor/compile_fx.py")) == (2, True)
    assert _phase(py("<module>", DYNAMO)) == (-1, False)
    assert _phase(py("step", "/home/me/train.py")) == (-1, False)

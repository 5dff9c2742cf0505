"""Symbolization: names, libraries, offsets and lines; unknown addresses never crash."""

from __future__ import annotations

import ctypes
import mmap
from pathlib import Path

from build_ext import SOURCE, call_lines


def test_static_and_exported_functions_of_the_extension(core, chain_ext):
    lib = ctypes.CDLL(chain_ext.__file__)
    base = ctypes.cast(lib.dcn_chain_c, ctypes.c_void_p).value
    name, library, offset, file, line, resolved = core.symbolize(base + 8)
    assert (name, library, resolved) == ("dcn_chain_c", chain_ext.__file__, True)
    assert offset > 0
    if core.native_info()["line_reader"]:
        assert Path(file).resolve() == SOURCE.resolve()
        assert 0 < line <= call_lines()["c"] + 2


def test_return_address_is_looked_up_at_the_call(core, chain_ext):
    # The first byte after a function is the next function; as a return address it still
    # belongs to the caller (ip-1), exactly as unwinders report frames.
    lib = ctypes.CDLL(chain_ext.__file__)
    start_b = ctypes.cast(lib.dcn_chain_b, ctypes.c_void_p).value
    assert core.symbolize(start_b, return_address=False)[0] == "dcn_chain_b"
    assert core.symbolize(start_b, return_address=True)[0] != "dcn_chain_b"


def test_interpreter_symbols_come_from_symtab(core):
    addr = ctypes.cast(ctypes.pythonapi._PyEval_EvalFrameDefault, ctypes.c_void_p).value + 8
    name, library, *_ = core.symbolize(addr)
    assert name == "_PyEval_EvalFrameDefault"
    assert core.native_is_eval_frame(addr)


def test_unknown_addresses_stay_addresses(core):
    name, library, offset, file, line, resolved = core.symbolize(0)
    assert (library, resolved, file, line) == ("", False, "", 0)
    assert name.startswith("0x")
    name, library, *_, resolved = core.symbolize(0x10)
    assert not resolved and name == "0x10" and library == ""


def test_mapped_memory_without_symbols_is_library_plus_offset(core):
    # An anonymous mapping is no object: plain address. A file mapping without symbols:
    # library+0xoffset. Neither crashes.
    m = mmap.mmap(-1, 4096)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    name, library, *_, resolved = core.symbolize(addr + 100)
    assert not resolved
    assert name == hex(addr + 100) or name.startswith(Path(library).name + "+0x")


def test_repeated_lookups_are_cached_and_equal(core, chain_ext):
    addr = ctypes.cast(ctypes.CDLL(chain_ext.__file__).dcn_chain_a, ctypes.c_void_p).value + 4
    assert core.symbolize(addr) == core.symbolize(addr)


def test_op_call_frames(core):
    f = core.native_op_call_frame
    assert f("at::_ops::mm::call(at::Tensor const&, at::Tensor const&)") == "mm"
    assert f("at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar const&)") == "add_Tensor"
    assert f("at::_ops::mm::call(at::Tensor const&, at::Tensor const&) [clone .cold]") == "mm"
    assert f("at::_ops::mm::redispatch(c10::DispatchKeySet, at::Tensor const&, at::Tensor const&)") is None
    assert f("at::native::mm(at::Tensor const&, at::Tensor const&)") is None
    assert f("dcn_chain_a") is None


def test_op_struct_names_match_recorded_names(core):
    m = core.native_op_name_matches
    assert m("mm", "aten::mm")
    assert m("add_Tensor", "aten::add")
    assert m("add_Tensor", "aten::add.Tensor")
    assert not m("add__Tensor", "aten::add")    # the in-place op
    assert m("add__Tensor", "aten::add_")
    assert not m("addmm", "aten::add")
    assert not m("mm", "aten::addmm")

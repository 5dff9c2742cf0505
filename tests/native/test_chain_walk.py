"""The walk that describes only the frames newer than the unchanged outer part of the last path
(python_walk.h: dc_walk_python_since), on this interpreter's real frames: the whole path it gives
is the interpreter's own stack every time, and what it keeps or describes again is exact."""

from __future__ import annotations

import sys
import traceback

import pytest

HERE = __file__


def stack_here(skip: int = 1) -> list[tuple[str, int]]:
    """(file, line) of every frame outside this call, outermost first, as Python reports them."""
    return [(f.filename, f.lineno) for f in traceback.extract_stack(sys._getframe(skip))]


@pytest.fixture()
def walk(core):
    assert core.watch_code_deaths(True)
    if sys.version_info < (3, 11):  # frames are objects from a free list: addresses say nothing
        assert core.chain_walk() is None
        core.watch_code_deaths(False)
        pytest.skip("the chain declines on CPython 3.10 (checked)")
    core.chain_walk()  # the chain starts from this fixture's own path
    yield core
    core.watch_code_deaths(False)


def checked(core, expect_kept=None, expect_new=None):
    """chain_walk from the caller's frame, its path compared with the interpreter's."""
    (kept, new, path), expect = core.chain_walk(), stack_here()  # one line: one line number
    assert path == expect
    assert kept + new == len(path)
    if expect_kept is not None:
        assert (kept, new) == (expect_kept, expect_new)
    return kept, new, len(path)


def same_line_twice(core):
    return [checked(core) for _ in range(2)]  # one line: the loop calls it from one instruction


def test_a_second_walk_from_the_same_instruction_keeps_every_frame(walk):
    (k1, n1, depth), (k2, n2, _) = same_line_twice(walk)
    assert (k2, n2) == (depth, 0)


def line_moves(core):
    checked(core)
    return checked(core)  # this frame's line moved: it and the new call are described


def test_a_moved_line_describes_its_frame_and_the_one_it_calls(walk):
    kept, new, depth = line_moves(walk)
    assert (kept, new) == (depth - 2, 2)


def g1(core):
    a = 1
    return checked(core) if a else None


def g2(core):
    b = 2
    return checked(core) if b else None


def test_a_sibling_at_the_same_address_is_described_not_taken_for_the_first(walk):
    _, _, depth = g1(walk)
    assert g2(walk)[:2] == (depth - 3, 3)  # this test's line moved; g2 and checked are new
    assert g1(walk)[:2] == (depth - 3, 3)


def deep(core, k):
    return deep(core, k - 1) if k else checked(core)


def test_recursion_to_other_depths(walk):
    for k in (5, 2, 7, 0, 3):
        deep(walk, k)


def gen(core):
    for _ in range(3):
        yield checked(core)


def test_a_generator_resumed_from_its_caller(walk):
    results = list(gen(walk))
    assert [r[:2] for r in results[1:]] == [(results[0][2], 0)] * 2


def test_a_code_object_freed_between_walks_makes_the_next_describe_everything(walk):
    def here():
        return walk.chain_walk()

    here()
    namespace = {}
    exec(compile("def gone(): pass", "<gone>", "exec"), namespace)
    del namespace  # the function and its code object die
    kept, new, path = here()
    assert kept == 0 and new == len(path)


def test_without_the_code_watch_the_walk_declines(core):
    core.watch_code_deaths(False)
    assert core.chain_walk() is None

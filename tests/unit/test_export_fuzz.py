"""Random trees with hostile text and odd values: every exporter and the viewer page either
produce well-formed output or a one-line user error, never a crash."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deepcontext.errors import DeepContextError
from deepcontext.render.exporters import EXPORTERS, ExportOptions
from deepcontext.render.html import build_page
from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.frame import KINDS, Frame

TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40) | \
    st.sampled_from(["<img src=x onerror=alert(1)>", "</script>", "\x1b[31m", "\ud800", ";", "",
                     "__proto__", "{{DATA}}", "a" * 500])
VALUES = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.integers(-10**6, 10**9) | \
    st.sampled_from([1e300, -1e300, 1.7e308, 5e-324])
METRICS = st.sampled_from(["cpu.time", "gpu.time", "op.count", "memcpy.bytes", "__proto__",
                           "weird metric <x>"])


pytest.importorskip("google.protobuf")
from _pprof_schema import profile_class

PROFILE = profile_class()
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _strings(doc):
    """Every string (keys too) in a parsed JSON document."""
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _reject(constant: str) -> None:
    raise AssertionError(f"{constant} is not JSON")


@st.composite
def trees(draw):
    tree = CallingContextTree({"command": draw(st.lists(TEXT, max_size=3))})
    for _ in range(draw(st.integers(0, 12))):
        parent = draw(st.integers(0, len(tree) - 1))
        frame = Frame.make(draw(st.sampled_from(KINDS[1:])), draw(TEXT), draw(TEXT),
                           draw(st.integers(-5, 10**6)), **draw(st.dictionaries(
                               st.sampled_from(["tid", "device", "note"]), TEXT, max_size=2)))
        node = tree.child(parent, frame)
        for metric, value in draw(st.dictionaries(METRICS, VALUES, max_size=3)).items():
            tree.add_metric(node, metric, float(value))
    return tree


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_exporters_never_crash(tree):
    for name, exporter in EXPORTERS.items():
        try:
            data = exporter.render(tree, ExportOptions())
        except DeepContextError as e:
            assert "\n" not in str(e)
            continue
        if name == "pprof":
            prof = PROFILE()
            prof.ParseFromString(gzip.decompress(data))
            assert not any(CONTROL.search(s) for s in prof.string_table)
        elif name == "folded":
            text = data.decode()
            assert not CONTROL.search(text.replace("\n", ""))
            for line in text.splitlines():
                assert re.fullmatch(r"[^\n\r]* -?\d+", line)
        else:
            doc = json.loads(data, parse_constant=_reject)  # strict JSON: no NaN or Infinity
            assert not any(CONTROL.search(s) for s in _strings(doc))  # no live ANSI escapes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_viewer_page_never_crashes_and_keeps_data_inert(tree):
    html = build_page(tree, findings=False)
    assert html.count("<script") == 2 and html.count("</script>") == 2
    data = re.search(r'id="dc-data">(.*?)</script>', html, re.DOTALL).group(1)
    assert len(json.loads(data, parse_constant=_reject)["nodes"]["parent"]) == len(tree)

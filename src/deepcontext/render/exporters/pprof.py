"""pprof's profile.proto (github.com/google/pprof/proto/profile.proto), gzipped: one sample per
calling context with one value per metric; opens in ``pprof``, Pyroscope and Grafana.

pprof values are integers, so seconds are written as nanoseconds (unit "nanoseconds"), bytes
and counts as they are.
"""

from __future__ import annotations

import gzip

from ...tree.cct import CallingContextTree
from ...tree.frame import PYTHON, Frame
from . import ExportOptions
from ._common import (
    chosen_metrics,
    display_name,
    finite_tree,
    inert_text,
    integer_unit,
    profile_title,
    scaled_int,
    walk_paths,
)
from ._protowire import Message

# Field numbers of profile.proto.
PROFILE_SAMPLE_TYPE, PROFILE_SAMPLE, PROFILE_LOCATION, PROFILE_FUNCTION = 1, 2, 4, 5
PROFILE_STRING_TABLE, PROFILE_TIME_NANOS, PROFILE_DURATION_NANOS = 6, 9, 10
PROFILE_COMMENT, PROFILE_DEFAULT_SAMPLE_TYPE = 13, 14
VALUE_TYPE_TYPE, VALUE_TYPE_UNIT = 1, 2
SAMPLE_LOCATION_ID, SAMPLE_VALUE = 1, 2
LOCATION_ID, LOCATION_LINE = 1, 4
LINE_FUNCTION_ID, LINE_LINE = 1, 2
FUNCTION_ID, FUNCTION_NAME, FUNCTION_SYSTEM_NAME, FUNCTION_FILENAME = 1, 2, 3, 4


class _Strings:
    """profile.proto's string table: index 0 is the empty string."""

    def __init__(self) -> None:
        self.table: list[str] = [""]
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        idx = self.index.get(text)
        if idx is None:
            idx = self.index[text] = len(self.table)
            self.table.append(text)
        return idx


class PprofExporter:
    name = "pprof"
    extensions = (".pb.gz", ".pprof")
    description = "pprof profile.proto, gzipped (pprof, Pyroscope, Grafana)"

    def render(self, tree: CallingContextTree, options: ExportOptions) -> bytes:
        """The gzipped serialized ``perftools.profiles.Profile``."""
        tree = finite_tree(tree)
        metrics = chosen_metrics(tree, options)
        scales = [integer_unit(m) for m in metrics]
        strings = _Strings()
        profile = Message()
        for m, (unit, _) in zip(metrics, scales):
            profile.message(PROFILE_SAMPLE_TYPE, Message().int(VALUE_TYPE_TYPE, strings(inert_text(m)))
                            .int(VALUE_TYPE_UNIT, strings(unit)))
        locations: dict[Frame, int] = {}
        functions: dict[tuple[str, str], int] = {}
        node_location: dict[int, int] = {}
        for node, path in walk_paths(tree, options):
            loc = locations.get(node.frame)
            if loc is None:
                loc = locations[node.frame] = len(locations) + 1
                fkey = (display_name(node.frame), inert_text(node.frame.file))
                fid = functions.get(fkey)
                if fid is None:
                    fid = functions[fkey] = len(functions) + 1
                    name = strings(fkey[0])
                    profile.message(PROFILE_FUNCTION, Message().int(FUNCTION_ID, fid)
                                    .int(FUNCTION_NAME, name).int(FUNCTION_SYSTEM_NAME, name)
                                    .int(FUNCTION_FILENAME, strings(fkey[1])))
                line = node.frame.line if node.frame.kind == PYTHON else 0
                profile.message(PROFILE_LOCATION, Message().int(LOCATION_ID, loc).message(
                    LOCATION_LINE, Message().int(LINE_FUNCTION_ID, fid).int(LINE_LINE, line)))
            node_location[node.id] = loc
            values = [scaled_int(node.metrics.get(m, 0.0), scale) for m, (_, scale) in zip(metrics, scales)]
            if any(values):
                sample = Message().packed(SAMPLE_LOCATION_ID, (node_location[i] for i in reversed(path)))
                sample.packed(SAMPLE_VALUE, values)  # one entry per sample type, zeros too
                profile.message(PROFILE_SAMPLE, sample)
        start, end = tree.metadata.get("start_time"), tree.metadata.get("end_time")
        if isinstance(start, (int, float)):
            profile.int(PROFILE_TIME_NANOS, int(start * 1e9))
            if isinstance(end, (int, float)) and end > start:
                profile.int(PROFILE_DURATION_NANOS, int((end - start) * 1e9))
        comment = strings(f"deepcontext: {profile_title(tree)}")
        default = strings(inert_text(metrics[0])) if metrics else 0
        for text in strings.table:
            profile.string(PROFILE_STRING_TABLE, text)
        profile.packed(PROFILE_COMMENT, [comment])
        profile.int(PROFILE_DEFAULT_SAMPLE_TYPE, default)
        return gzip.compress(profile.to_bytes(), mtime=0)


EXPORTER = PprofExporter()

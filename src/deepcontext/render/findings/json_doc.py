"""Findings as JSON, schema ``deepcontext.findings/1`` (documented in docs/analyzer.md)."""

from __future__ import annotations

import json as _json
from collections import Counter

from . import FindingsReport

SCHEMA = "deepcontext.findings/1"


class JsonFindingsRenderer:
    name = "json"
    extension = ".json"

    def render(self, report: FindingsReport) -> str:
        counts = Counter(f.severity for f in report.findings)
        meta = report.metadata
        doc = {
            "schema": SCHEMA,
            "profile": report.profile,
            "command": meta.get("command"),
            "complete": meta.get("complete"),
            "profiled_time_s": report.profiled_time,
            "profiled_metric": report.profiled_metric,
            "wall_time_s": report.wall_time,
            "counts": {s: counts.get(s, 0) for s in ("error", "warning", "note")},
            "rules": [r.id for r in report.rules],
            "findings": [f.to_dict() for f in report.findings],
        }
        return _json.dumps(doc, indent=1, ensure_ascii=False, default=str)

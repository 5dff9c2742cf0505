"""Findings as SARIF 2.1.0, so editors and code review show them at the user's source line."""

from __future__ import annotations

import hashlib
import json as _json
from pathlib import Path

from ...analysis.finding import Finding
from ...analysis.rule import Rule
from . import FindingsReport

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(path: str) -> str:
    """An absolute file path as a ``file://`` URI (percent-encoded); relative paths as given."""
    p = Path(path)
    return p.as_uri() if p.is_absolute() else path.replace("\\", "/")


def _rule_descriptor(rule: Rule) -> dict:
    return {
        "id": rule.id,
        "name": type(rule).__name__,
        "shortDescription": {"text": rule.description.split(". ")[0].rstrip(".") + "."},
        "fullDescription": {"text": rule.description},
        "help": {"text": f"See docs/analyzer.md, rule {rule.id}: thresholds and rationale."},
        "properties": {
            "category": rule.category,
            "thresholds": {k: rule.t(k) for k in rule.thresholds},
        },
    }


def _result(f: Finding, rule_index: dict[str, int]) -> dict:
    result: dict = {
        "ruleId": f.rule,
        "level": f.severity,  # SARIF levels include note, warning and error verbatim
        "message": {"text": f"{f.title}. {f.message} Fix: {f.suggestion}"},
        "partialFingerprints": {
            "deepcontextContext/v1": hashlib.sha256(
                "\x1f".join([f.rule, *f.path]).encode("utf-8", "surrogatepass")).hexdigest(),
        },
        "properties": {
            "category": f.category,
            "title": f.title,
            "suggestion": f.suggestion,
            "evidence": f.evidence,
            "estimatedGain": f.estimated_gain.to_dict(),
            "node": f.node,
            "contextPath": f.path,
        },
    }
    if f.rule in rule_index:
        result["ruleIndex"] = rule_index[f.rule]
    if f.location is not None:
        loc = f.location
        location: dict = {"logicalLocations": [{"name": loc.function, "kind": "function"}]}
        if not loc.file.startswith("<") and loc.line > 0:
            location["physicalLocation"] = {
                "artifactLocation": {"uri": _uri(loc.file)},
                "region": {"startLine": loc.line},
            }
        result["locations"] = [location]
    return result


class SarifRenderer:
    name = "sarif"
    extension = ".sarif"

    def render(self, report: FindingsReport) -> str:
        from ... import __version__

        rules = list(report.rules)
        index = {r.id: i for i, r in enumerate(rules)}
        run = {
            "tool": {"driver": {"name": "deepcontext", "version": __version__,
                                "rules": [_rule_descriptor(r) for r in rules]}},
            "results": [_result(f, index) for f in report.findings],
            "invocations": [{"executionSuccessful": True}],
            "properties": {"profile": report.profile, "profiledTimeSeconds": report.profiled_time,
                           "profiledMetric": report.profiled_metric,
                           "wallTimeSeconds": report.wall_time},
        }
        doc = {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
        return _json.dumps(doc, indent=1, ensure_ascii=False, default=str)

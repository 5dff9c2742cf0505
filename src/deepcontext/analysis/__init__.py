"""The analyzer: rules that turn a calling context tree into ranked, evidenced findings.

    from deepcontext.analysis import analyze
    for finding in analyze(tree):
        print(finding.to_dict())
"""

from __future__ import annotations

from .context import AnalysisContext, OpSite
from .engine import analyze, merge_duplicates
from .finding import CATEGORIES, SEVERITIES, EstimatedGain, Finding, Location
from .registry import (ENTRY_POINT_GROUP, builtin_rules, default_rules, entry_point_rules,
                       load_rules_file)
from .rule import Rule, Threshold
from ..tree.usercode import is_user_file

__all__ = [
    "AnalysisContext", "CATEGORIES", "ENTRY_POINT_GROUP", "EstimatedGain", "Finding", "Location",
    "OpSite", "Rule", "SEVERITIES", "Threshold", "analyze", "builtin_rules", "default_rules",
    "entry_point_rules", "is_user_file", "load_rules_file", "merge_duplicates",
]

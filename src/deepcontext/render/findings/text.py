"""Findings for a terminal: short, most valuable first, each with why, fix and gain."""

from __future__ import annotations

import shlex
import textwrap

from ...tree.metrics import format_value
from .._safe import printable
from . import FindingsReport


WIDTH = 100


def _wrapped(label: str, text: str) -> list[str]:
    """``   label text`` wrapped at WIDTH with continuation lines under the text."""
    return textwrap.wrap(text, WIDTH, initial_indent="   " + label,
                         subsequent_indent=" " * (3 + len(label)), break_on_hyphens=False,
                         break_long_words=False) or ["   " + label]


def _basis(report: FindingsReport) -> str:
    """What every percentage is a share of, and what else was measured, so the metric never
    changes unseen between two runs."""
    total = format_value(report.profiled_time, "s")
    if not report.profiled_metric:
        return f"shares are of the profiled time, {total} outside imports"
    others = [f"{m} {format_value(v, 's')}" for m, v in report.profiled_times.items()
              if m != report.profiled_metric and v > 0]
    return (f"shares are of {total} {report.profiled_metric} outside imports"
            + (f" (also measured: {', '.join(others)})" if others else ""))


class TextFindingsRenderer:
    name = "text"
    extension = ".txt"

    def render(self, report: FindingsReport) -> str:
        findings = report.findings
        plural = "" if len(findings) == 1 else "s"
        lines = [f"{printable(report.profile)}: {len(findings)} finding{plural}; "
                 f"{_basis(report)}"]
        if report.metadata.get("complete") is False:
            lines.append("note: this profile is incomplete (the program was killed or crashed "
                         "before the final flush); findings cover what was flushed")
        if not findings:
            lines.append("no findings: nothing above the rules' thresholds")
        for i, f in enumerate(findings, 1):
            where = "(no line of your code on this path)"
            if f.location:
                short = f.location.file.rsplit("/", 1)[-1]
                where = f"{printable(short)}:{f.location.line} in {printable(f.location.function)}"
            gain = f.estimated_gain
            lines += ["", f"{i}. {f.severity.upper():7} [{f.rule}] {where}",
                      f"   {printable(f.title)}"]
            lines += _wrapped("why:  ", printable(f.message, 1000))
            # a command to copy names the profile being read (rules do not know its path)
            fix = f.suggestion.replace("deepcontext report PROFILE ",
                                       f"deepcontext report {shlex.quote(report.profile)} ")
            lines += _wrapped("fix:  ", printable(fix, 1000))
            if gain.seconds > 0 or gain.fraction > 0:
                lines += _wrapped("gain: ", f"~{format_value(gain.seconds, 's')} "
                                            f"({100 * gain.fraction:.1f}% of profiled time): "
                                            f"{printable(gain.method)}")
            else:  # memory findings save bytes, not time
                lines += _wrapped("gain: ", printable(gain.method))
            if f.location:
                lines.append(f"   at:   {printable(f.location.file)}:{f.location.line}")
        return "\n".join(lines) + "\n"

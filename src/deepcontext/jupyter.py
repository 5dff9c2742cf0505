"""Jupyter: ``%load_ext deepcontext``, the ``%%deepcontext`` cell magic, and inline results for
``deepcontext.profile()`` in a notebook.

Each shows, right under the cell, the profile's flame graph (the offline viewer, in a sandboxed
iframe) and the analyzer's findings; the plain-text form (for consoles and exported notebooks)
is the top-down report and the findings as ``deepcontext report`` / ``analyze`` print them.
"""

from __future__ import annotations

import argparse
import html
import io
import shlex
import sys
from pathlib import Path
from typing import Any

from .errors import DeepContextError

__all__ = ["ProfileDisplay", "in_notebook", "load_ipython_extension", "show"]

#: Height of the inline flame graph, in CSS pixels.
FRAME_HEIGHT = 560


def _ipython() -> Any:
    module = sys.modules.get("IPython")  # never imported here: scripts stay IPython-free
    if module is None:
        return None
    try:
        return module.get_ipython()
    except Exception:  # noqa: BLE001 - no shell
        return None


def in_notebook() -> bool:
    """True inside a Jupyter kernel (a notebook, JupyterLab, VS Code), not a terminal IPython."""
    ip = _ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class ProfileDisplay:
    """A profile as rich output: the flame graph and findings (HTML), or their text forms."""

    def __init__(self, path: str | Path, *, findings: bool = True, depth: int = 8) -> None:
        from .tree.profile_file import load

        self.path = Path(path)
        self.tree = load(self.path)
        self.findings = findings
        self.depth = depth

    def _findings_text(self) -> str:
        if not self.findings:
            return ""
        from .analysis import AnalysisContext, analyze, default_rules
        from .render.findings import FindingsReport, render

        rules = default_rules()
        ctx = AnalysisContext(self.tree)
        report = FindingsReport(findings=analyze(self.tree, rules=rules), profile=str(self.path),
                                rules=rules, profiled_time=ctx.profiled_time,
                                wall_time=ctx.wall_time, metadata=self.tree.metadata,
                                profiled_metric=ctx.profiled_metric,
                                profiled_times=ctx.profiled_times)
        return render(report, "text")

    def _tree_text(self) -> str:
        from rich.console import Console

        from .render import text
        from .tree import views

        tree = views.user_frames(self.tree)
        out = io.StringIO()
        console = Console(file=out, width=text.PIPE_WIDTH, highlight=False, soft_wrap=False,
                          color_system=None, force_jupyter=False)  # a string, not a display
        text.render_tree(console, tree, tree.default_metric(), depth=self.depth,
                         threshold=0.005, title="top-down")
        return out.getvalue()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from .render.html import build_page

        findings = self._findings_text()
        page = build_page(self.tree, sources=True, findings=self.findings)
        frame = (f'<iframe class="deepcontext-flame" sandbox="allow-scripts" '
                 f'style="width:100%;height:{FRAME_HEIGHT}px;border:1px solid #d8dce3" '
                 f'srcdoc="{html.escape(page, quote=True)}"></iframe>')
        parts = [f'<div class="deepcontext"><div>DeepContext profile: '
                 f'<code>{html.escape(str(self.path))}</code></div>', frame]
        if findings:
            parts.append(f'<pre class="deepcontext-findings">{html.escape(findings)}</pre>')
        parts.append("</div>")
        plain = f"DeepContext profile: {self.path}\n{self._tree_text()}"
        if findings:
            plain += "\n" + findings
        return {"text/html": "\n".join(parts), "text/plain": plain}


def show(path: str | Path, **kwargs: Any) -> None:
    """Display a profile inline in the running notebook."""
    from IPython.display import display

    display(ProfileDisplay(path, **kwargs))


def _magic_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="%%deepcontext", add_help=False, exit_on_error=False)
    p.add_argument("-o", "--output", help="profile file (default: notebook.dcprof, never "
                                          "overwriting)")
    p.add_argument("-f", "--force", action="store_true")
    p.add_argument("--context", default=None)
    p.add_argument("--sample-interval", type=float, default=0.01)
    p.add_argument("--no-findings", action="store_true")
    return p


def parse_magic_line(line: str) -> argparse.Namespace:
    """The cell magic's options (pure; errors are one-line DeepContextErrors)."""
    try:
        args, extra = _magic_parser().parse_known_args(shlex.split(line))
    except (argparse.ArgumentError, ValueError) as e:
        raise DeepContextError(f"%%deepcontext: {e}") from None
    if extra:
        raise DeepContextError(f"%%deepcontext: unknown option {extra[0]!r} (options: -o FILE, "
                               "-f, --context LAYERS, --sample-interval S, --no-findings)")
    return args


def _cell_magic(line: str, cell: str) -> None:
    from .capture.session import Session, default_output

    ip = _ipython()
    try:
        args = parse_magic_line(line)
        session = Session(args.output or default_output("notebook"), context=args.context,
                          sample_interval=args.sample_interval, force=args.force,
                          command=["%%deepcontext", *shlex.split(line)])
        session.start()
    except DeepContextError as e:
        print(f"deepcontext: error: {e}", file=sys.stderr)
        return
    cell = ip.transform_cell(cell)  # %magics and !commands inside the cell, as IPython runs them
    filename = ip.compile.cache(cell, ip.execution_count)
    code = ip.compile(cell, filename, "exec")
    try:
        exec(code, ip.user_ns)  # noqa: S102 - the user's own cell, as IPython runs it
    finally:
        session.stop()
        show(session.output, findings=not args.no_findings)


def load_ipython_extension(ip: Any) -> None:
    """``%load_ext deepcontext``: registers ``%%deepcontext``."""
    ip.register_magic_function(_cell_magic, magic_kind="cell", magic_name="deepcontext")

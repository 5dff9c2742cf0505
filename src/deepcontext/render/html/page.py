"""One self-contained HTML page: template + hand-written CSS/JS + the data as inert JSON.

The data sits in ``<script type="application/json">`` with ``<``, ``>`` and ``&`` escaped, so no
name from the profile can close the element or start markup; the page's script reads it with
``JSON.parse`` and only ever shows names through ``textContent`` or canvas text. A
Content-Security-Policy with hashes of our own script and style forbids every network access.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from ...tree.cct import CallingContextTree
from ._data import build_document, load_findings

_PLACEHOLDER = re.compile(r"\{\{([A-Z]+)\}\}")


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def content_security_policy(script: str, style: str) -> str:
    """Only our inline script and style run; nothing may be fetched, framed or submitted."""
    return ("default-src 'none'; "
            f"script-src {_sha256(script)}; style-src {_sha256(style)}; "
            "img-src 'none'; font-src 'none'; connect-src 'none'; media-src 'none'; "
            "object-src 'none'; frame-src 'none'; worker-src 'none'; manifest-src 'none'; "
            "form-action 'none'; base-uri 'none'")


def json_for_script(doc: Any) -> str:
    """JSON that is inert inside a script element: no ``<``, ``>`` or ``&`` survive."""
    text = json.dumps(doc, ensure_ascii=True, separators=(",", ":"), default=str,
                      allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


#: the page's script, in order: the data model, the panels, then the page that uses them
SCRIPTS = ("model.js", "findings.js", "instructions.js", "ranks.js", "viewer.js")


def _script() -> str:
    return "\n".join(_asset(name) for name in SCRIPTS)


def page_csp() -> str:
    """The policy of every page this version writes (the server sends it as a header too)."""
    return content_security_policy(_script(), _asset("viewer.css"))


def render_page(doc: dict[str, Any]) -> str:
    """The HTML text for a data document."""
    script, style = _script(), _asset("viewer.css")
    parts = {"CSP": content_security_policy(script, style), "STYLE": style, "SCRIPT": script,
             "DATA": json_for_script(doc)}
    # one pass: text substituted in is never scanned again for placeholders
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], _asset("template.html"))


def build_page(tree: CallingContextTree, *, sources: bool = True, findings: bool = True,
               advance: Callable[[int], None] | None = None) -> str:
    """The complete viewer page for a profile."""
    found, status = load_findings(tree) if findings else ([], "analysis skipped")
    return render_page(build_document(tree, findings=found, findings_status=status,
                                      sources=sources, advance=advance))

"""The offline viewer: one self-contained HTML file (flame graph, findings, source)."""

from .page import build_page, content_security_policy, json_for_script, page_csp, render_page

__all__ = ["build_page", "content_security_policy", "json_for_script", "page_csp", "render_page"]

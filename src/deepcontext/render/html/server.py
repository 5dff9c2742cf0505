"""``deepcontext view --serve``: one page on the loopback interface, nothing else.

Answers only ``/`` and the page's own name; any other path (``..`` tricks included) is 404,
a Host header that does not name the loopback address is refused (DNS-rebinding defence), and
the socket binds 127.0.0.1 only.
"""

from __future__ import annotations

import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LOOPBACK = "127.0.0.1"
_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Cross-Origin-Resource-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


class PageServer(ThreadingHTTPServer):
    """Serves one in-memory page; ``page_name`` is the only path besides ``/``."""

    daemon_threads = True

    def __init__(self, page: bytes, page_name: str, csp: str, port: int = 0) -> None:
        self.page, self.page_name, self.csp = page, page_name, csp
        super().__init__((LOOPBACK, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/"

    def allowed_hosts(self) -> set[str]:
        return {f"{h}:{self.port}" for h in (LOOPBACK, "localhost")}

    def serve_in_thread(self) -> threading.Thread:
        """Start serving on a daemon thread (tests, and the CLI's wait loop)."""
        thread = threading.Thread(target=self.serve_forever, name="deepcontext-view", daemon=True)
        thread.start()
        return thread


class _Handler(BaseHTTPRequestHandler):
    server: PageServer
    server_version = "deepcontext"
    sys_version = ""

    def _answer(self, head_only: bool) -> None:
        host = (self.headers.get("Host") or "").strip().lower()
        if host not in self.server.allowed_hosts():
            self._error(HTTPStatus.FORBIDDEN, head_only)
            return
        path = unquote(urlsplit(self.path).path)  # compared only, never opened
        if path not in ("/", "/" + self.server.page_name):
            self._error(HTTPStatus.NOT_FOUND, head_only)
            return
        self.send_response(HTTPStatus.OK)
        for key, value in _HEADERS.items():
            self.send_header(key, value)
        self.send_header("Content-Security-Policy", self.server.csp)
        self.send_header("Content-Length", str(len(self.server.page)))
        self.end_headers()
        if not head_only:
            self.wfile.write(self.server.page)

    def _error(self, status: HTTPStatus, head_only: bool) -> None:
        body = f"{status.value} {status.phrase}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head_only:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(head_only=False)

    def do_HEAD(self) -> None:
        self._answer(head_only=True)

    def _refuse(self) -> None:
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, head_only=False)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the CLI prints the URL once; request paths are attacker-chosen text

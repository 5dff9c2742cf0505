"""``deepcontext view``: write the profile as one offline HTML page and open or serve it."""

from __future__ import annotations

import argparse
import os
import sys
import time
import webbrowser
from pathlib import Path

from ..errors import DeepContextError
from ..render._safe import printable
from ..render.html import build_page, page_csp
from ..tree.profile_file import check_writable, load
from ._profiles import profile_argument
from ..tree.merge import select_rank
from .export import progress_for, write_atomically

HELP = "write a self-contained HTML flame graph (offline) and open it, or serve it on 127.0.0.1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?",
                   help="a .dcprof profile (default: the newest one in this directory)")
    p.add_argument("--rank", type=int, metavar="N",
                   help="one rank's own values of a merged multi-rank profile")
    p.add_argument("-o", "--output", help="HTML file to write (default: FILE with .html)")
    p.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
    p.add_argument("--serve", action="store_true",
                   help="serve the page on http://127.0.0.1 (loopback only) until Ctrl-C")
    p.add_argument("--port", type=int, default=0, help="port for --serve (default: any free one)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.add_argument("--no-source", action="store_true",
                   help="do not embed the program's source files in the page")
    p.add_argument("--no-findings", action="store_true", help="do not run the analyzer")


def output_path(args: argparse.Namespace) -> Path:
    """Where the page goes (pure)."""
    if args.output:
        return Path(args.output)
    src = Path(args.file)
    return src.with_name(src.name.removesuffix(".dcprof") + ".html")


def validate(args: argparse.Namespace) -> None:
    if not 0 <= args.port <= 65535:
        raise DeepContextError("--port must be between 0 and 65535")
    if args.port and not args.serve:
        raise DeepContextError("--port only makes sense with --serve")


def _graphical_browser() -> webbrowser.BaseBrowser | None:
    """A browser that opens in its own window, or None. Console browsers (lynx, w3m, a
    $BROWSER command) would take over this terminal or wait, so they are never used."""
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                 or os.environ.get("WAYLAND_DISPLAY")):
        return None
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return None
    if type(browser) is webbrowser.GenericBrowser:
        return None
    return browser


def open_in_browser(url: str) -> bool:
    """Try to show ``url``; False (never a hang or an error) when no browser is usable."""
    browser = _graphical_browser()
    if browser is None:
        return False
    try:
        return bool(browser.open(url, new=2))
    except Exception:  # noqa: BLE001 - a broken browser setup must not fail the command
        return False


def serve(page: bytes, name: str, port: int, no_browser: bool) -> int:
    """Serve the page until interrupted."""
    from ..render.html.server import PageServer

    try:
        server = PageServer(page, name, page_csp(), port)
    except OSError as e:
        raise DeepContextError(f"cannot listen on 127.0.0.1:{port}: {e.strerror or e}") from None
    with server:
        server.serve_in_thread()
        try:  # from the first line on: a Ctrl-C right after it is a normal stop too
            print(f"serving {printable(name)} on {server.url} (loopback only; Ctrl-C to stop)",
                  file=sys.stderr, flush=True)
            if not no_browser:
                open_in_browser(server.url)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
        finally:
            server.shutdown()
    return 0


def run(args: argparse.Namespace) -> int:
    validate(args)
    args.file = profile_argument(args.file, "view")
    out = output_path(args)
    check_writable(out, force=args.force)
    tree = select_rank(load(args.file), args.rank)
    with progress_for(tree, "writing the page") as advance:
        html = build_page(tree, sources=not args.no_source, findings=not args.no_findings,
                          advance=advance)
    data = html.encode("utf-8")
    try:
        write_atomically(out, data)
    except OSError as e:
        raise DeepContextError(f"cannot write {printable(str(out))}: {e.strerror or e}") from None
    print(f"wrote {printable(str(out))} ({len(tree):,} nodes, {len(data):,} bytes)", file=sys.stderr)
    if args.serve:
        return serve(data, out.name, args.port, args.no_browser)
    if not args.no_browser and open_in_browser(out.resolve().as_uri()):
        print("opened it in your browser", file=sys.stderr)
    elif not args.no_browser:
        print(f"open it in a browser: {out.resolve().as_uri()}", file=sys.stderr)
    return 0

"""``deepcontext view``: output naming, no silent overwrite, browser opening that never hangs,
and the loopback server that answers only its own page."""

from __future__ import annotations

import http.client
import socket
import webbrowser
from typing import ClassVar

import pytest
from _export_trees import training_tree

from deepcontext.cli import view
from deepcontext.cli.main import main, parse_args
from deepcontext.render.html.server import PageServer
from deepcontext.tree.profile_file import save


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "run.dcprof"
    save(training_tree(), path)
    return path


def test_default_output_and_no_overwrite(profile, capsys):
    assert main(["view", str(profile), "--no-browser", "--no-findings"]) == 0
    out = profile.with_name("run.html")
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert main(["view", str(profile), "--no-browser"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["view", str(profile), "--no-browser", "--force", "--no-findings"]) == 0


def test_output_option_and_bad_arguments(profile, tmp_path, capsys):
    args = parse_args(["view", str(profile), "-o", str(tmp_path / "x.html")])
    assert view.output_path(args) == tmp_path / "x.html"
    assert main(["view", str(profile), "--port", "80"]) == 2
    assert main(["view", str(profile), "--serve", "--port", "70000"]) == 2
    assert main(["view", str(tmp_path / "missing.dcprof"), "--no-browser"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(e.startswith("deepcontext: error:") for e in err)


def test_no_display_means_no_browser(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(view.sys, "platform", "linux")
    monkeypatch.setattr(webbrowser, "get", lambda *a: pytest.fail("must not look for a browser"))
    assert view.open_in_browser("file:///x.html") is False


def test_console_browsers_are_never_started(monkeypatch):
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(webbrowser, "get", lambda *a: webbrowser.GenericBrowser("lynx"))
    assert view.open_in_browser("file:///x.html") is False

    class Gui(webbrowser.BackgroundBrowser):
        opened: ClassVar[list[str]] = []

        def open(self, url, new=0, autoraise=True):
            self.opened.append(url)
            return True

    monkeypatch.setattr(webbrowser, "get", lambda *a: Gui("firefox"))
    assert view.open_in_browser("file:///x.html") is True and Gui.opened == ["file:///x.html"]
    monkeypatch.setattr(webbrowser, "get", lambda *a: (_ for _ in ()).throw(webbrowser.Error()))
    assert view.open_in_browser("file:///x.html") is False


@pytest.fixture(scope="module")
def server():
    srv = PageServer(b"<!DOCTYPE html>page", "my run.html", "default-src 'none'")
    srv.serve_in_thread()
    yield srv
    srv.shutdown()
    srv.server_close()


def request(srv, path, host=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.putrequest(method, path, skip_host=True)
    conn.putheader("Host", host if host is not None else f"127.0.0.1:{srv.port}")
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp, body


def test_server_binds_loopback_and_serves_the_page(server):
    assert server.server_address[0] == "127.0.0.1"
    resp, body = request(server, "/")
    assert resp.status == 200 and body == b"<!DOCTYPE html>page"
    assert resp.getheader("Content-Security-Policy") == "default-src 'none'"
    assert resp.getheader("X-Content-Type-Options") == "nosniff"
    assert request(server, "/my%20run.html", host=f"localhost:{server.port}")[0].status == 200
    assert request(server, "/?x=1")[0].status == 200


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd",
                                  "//etc/passwd", "/my%20run.html/../../x", "/favicon.ico", "/my%20run.html%00",
                                  "/run.dcprof", "/..%2f..%2fetc%2fpasswd", "\\..\\x"])
def test_server_answers_404_for_anything_else(server, path):
    resp, body = request(server, path)
    assert resp.status == 404 and b"page" not in body


@pytest.mark.parametrize("host", ["evil.example", f"evil.example:{0}", "127.0.0.1", "",
                                  "127.0.0.1.nip.io:{port}", "localhost:1"])
def test_server_rejects_foreign_host_headers(server, host):
    resp, _ = request(server, "/", host=host.format(port=server.port))
    assert resp.status == 403


def test_server_refuses_other_methods(server):
    assert request(server, "/", method="POST")[0].status == 405


def test_server_is_not_reachable_on_other_interfaces(server):
    addrs = {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    for addr in addrs - {"127.0.0.1"}:
        if addr.startswith("127."):
            continue
        with pytest.raises(OSError):
            socket.create_connection((addr, server.port), timeout=1).close()


def test_serve_end_to_end(profile, tmp_path):
    import re
    import signal
    import subprocess
    import sys

    out = tmp_path / "served.html"
    proc = subprocess.Popen([sys.executable, "-m", "deepcontext", "view", str(profile), "-o",
                             str(out), "--serve", "--no-browser", "--no-findings"],
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while not any("serving" in line for line in lines):
            line = proc.stderr.readline()
            assert line, f"server exited: {lines}"
            lines.append(line)
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", lines[-1]).group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/served.html")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == out.read_bytes()
        assert "default-src 'none'" in resp.getheader("Content-Security-Policy")
        conn.request("GET", "/run.dcprof")
        resp = conn.getresponse()
        assert resp.status == 404
        resp.read()
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0


def test_hostile_output_names_are_printed_inert(profile, tmp_path, capsys):
    out = tmp_path / "evil\x1b[31m.html"
    assert main(["view", str(profile), "-o", str(out), "--no-browser", "--no-findings"]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and "evil\\x1b[31m.html" in err


def test_large_page_shows_progress_on_a_terminal(tmp_path):
    import os
    import subprocess
    import sys

    from deepcontext.cli.export import PROGRESS_MIN_NODES
    from deepcontext.tree.cct import CallingContextTree
    from deepcontext.tree.frame import Frame

    tree = CallingContextTree()
    for i in range(PROGRESS_MIN_NODES):
        tree.add_metric(tree.add_path([Frame.make("op", f"op{i}")]), "op.count", 1)
    path = tmp_path / "wide.dcprof"
    save(tree, path)
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "view", str(path), "--no-browser",
                           "--no-findings"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "FORCE_COLOR": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "writing the page" in proc.stderr

"""Real headless Chromium (Debian's ``chromium``) driven by Playwright; skipped cleanly when
either is missing (.ci/run installs both)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deepcontext.cli.main import main as cli_main
from deepcontext.tree.cct import CallingContextTree
from deepcontext.tree.profile_file import save

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]  # containers often have a tiny /dev/shm


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="session")
def browser():
    executable = _chromium()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Opened:
    """A loaded viewer page and everything it tried to do."""

    page: object
    url: str
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def api(self, expr: str):
        return self.page.evaluate(f"() => window.deepcontextViewer.{expr}")


@pytest.fixture
def open_viewer(browser, tmp_path):
    """Save a tree, run ``deepcontext view`` on it and load the page in Chromium."""
    contexts = []

    def _open(tree: CallingContextTree, name: str = "run", *, width: int = 1200,
              height: int = 700) -> Opened:
        profile = tmp_path / f"{name}.dcprof"
        save(tree, profile, force=True)
        html = tmp_path / f"{name}.html"
        assert cli_main(["view", str(profile), "-o", str(html), "--no-browser", "--force",
                         "--no-findings"]) == 0
        return load_page(html.as_uri(), width=width, height=height)

    def load_page(url: str, *, width: int = 1200, height: int = 700) -> Opened:
        ctx = browser.new_context(viewport={"width": width, "height": height})
        contexts.append(ctx)
        page = ctx.new_page()
        opened = Opened(page, url)
        page.on("request", lambda r: opened.requests.append(r.url))
        page.on("dialog", lambda d: (opened.dialogs.append(d.message), d.dismiss()))
        page.on("pageerror", lambda e: opened.errors.append(str(e)))
        page.on("console", lambda m: m.type == "error" and opened.errors.append(m.text))
        page.goto(url)
        page.wait_for_function("() => window.deepcontextViewer !== undefined")
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r()))")
        return opened

    _open.load_page = load_page
    yield _open
    for ctx in contexts:
        ctx.close()


PROGRAM = textwrap.dedent("""
    import torch

    def layer(x, w):
        return torch.relu(x @ w)

    def main():
        x, w = torch.randn(64, 128), torch.randn(128, 128)
        for _ in range(20):
            y = layer(x, w).sum()
        print(float(y) != 0)

    main()
""")


@pytest.fixture(scope="session")
def torch_profile(tmp_path_factory) -> Path:
    """A profile recorded from a real PyTorch program by the real CLI."""
    pytest.importorskip("torch")
    work = tmp_path_factory.mktemp("torch")
    prog = work / "prog.py"
    prog.write_text(PROGRAM)
    out = work / "prog.dcprof"
    proc = subprocess.run([sys.executable, "-m", "deepcontext", "record", "-o", str(out), "--",
                           sys.executable, str(prog)], check=False, cwd=work, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr
    return out

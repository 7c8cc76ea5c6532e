"""A real Chromium driven by Playwright: Debian's ``chromium`` (``make setup`` installs it with apt), or
the one ``WORKBENCH_CHROMIUM`` names. Playwright's own browser download is never needed.

Where no browser can start these tests skip and say why; with ``WORKBENCH_REQUIRE_BROWSER=1`` (``.ci/run``)
its absence fails them. Every page is routed: a request that leaves the machine (anything but ``file:``
and loopback) is refused and recorded, and the tests assert there were none.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import pytest

REQUIRE_ENV = "WORKBENCH_REQUIRE_BROWSER"
CHROMIUM_ENV = "WORKBENCH_CHROMIUM"
LOCAL = {"127.0.0.1", "localhost", "[::1]", "::1"}


def chromium() -> str | None:
    return os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")


def _missing(why: str) -> None:
    if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
        pytest.fail(f"{why} ({REQUIRE_ENV} requires a browser)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        _missing("playwright is not installed (it is in the dev extra: make setup)")
    path = chromium()
    if not path:
        _missing(f"no chromium on PATH: apt-get install chromium (make setup does), or set {CHROMIUM_ENV}")
    with sync_playwright() as pw:
        try:
            b = pw.chromium.launch(executable_path=path, headless=True)
        except Error as e:
            _missing(f"chromium at {path} did not start: {str(e).splitlines()[0]}")
        yield b
        b.close()


@dataclass
class Watched:
    """A page with what it did: requests refused for leaving the machine, JavaScript errors."""

    page: object
    refused: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def shot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path), full_page=True)
        return path


def _local(url: str) -> bool:
    u = urlparse(url)
    return u.scheme in ("file", "data", "blob", "about") or (u.scheme in ("http", "https", "ws", "wss")
                                                             and u.hostname in LOCAL)


@pytest.fixture
def watched(browser):
    """A fresh page (own context) whose every request is routed: off-machine ones are aborted and recorded;
    console errors and uncaught exceptions are recorded."""

    def open_page(width: int = 1400, height: int = 1000) -> Watched:
        ctx = browser.new_context(viewport={"width": width, "height": height})
        page = ctx.new_page()
        w = Watched(page)

        def route(r) -> None:
            if _local(r.request.url):
                r.continue_()
            else:
                w.refused.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("console", lambda m: w.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: w.errors.append(f"uncaught: {e}"))
        opened.append(ctx)
        return w

    opened: list = []
    yield open_page
    for ctx in opened:
        ctx.close()


"""Headless Chromium (Debian's package) driven by Playwright, and where the
browser tests leave their screenshots for review."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="session")
def screenshots() -> Path:
    """``build/test-output/dashboard`` unless TRAINPLANE_TEST_OUTPUT says elsewhere."""
    base = Path(os.environ.get("TRAINPLANE_TEST_OUTPUT", ROOT / "build" / "test-output"))
    folder = base / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: scripts/setup installs it"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield chromium
        chromium.close()


class ConsoleErrors(list[str]):
    """Console errors and uncaught exceptions of one page."""

    def watch(self, page: Any) -> Any:
        page.on("console", lambda m: self.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.append(f"uncaught: {e}"))
        return page

    def expected(self, status: int) -> int:
        """Forget the errors Chromium logs for responses of ``status`` that a
        test provoked on purpose (a refused spec is a 422); returns how many."""
        kept = [e for e in self if f"status of {status} " not in e]
        dropped = len(self) - len(kept)
        self[:] = kept
        return dropped


@pytest.fixture
def console() -> ConsoleErrors:
    return ConsoleErrors()


@pytest.fixture
def page(browser: Any, console: ConsoleErrors) -> Iterator[Any]:
    """A fresh 1280x800 page; the test fails if the page logged any error."""
    context = browser.new_context(viewport=VIEWPORT)
    tab = console.watch(context.new_page())
    tab.set_default_timeout(20_000)
    yield tab
    context.close()
    assert not console, f"console errors: {console}"

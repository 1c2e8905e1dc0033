"""Headless Chromium for the browser tests: Debian's chromium driven by Playwright.

Needs `apt-get install -y chromium` and `pip install playwright` (no browser download:
Playwright drives the system chromium; STREAMEVAL_CHROMIUM names another binary). A test
module calls `require_browser()` as it is imported: without them its tests skip and say so,
or fail where STREAMEVAL_REQUIRE_BROWSER is set (CI).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path(os.environ.get("STREAMEVAL_CHROMIUM", "/usr/bin/chromium"))
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    # CI sets STREAMEVAL_REQUIRE_BROWSER: there a missing browser is an error, not a skip.
    if os.environ.get("STREAMEVAL_REQUIRE_BROWSER"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_browser() -> None:
    """Skip (or fail, in CI) the calling test module without chromium or Playwright."""
    if not CHROMIUM.is_file():
        _unavailable(f"no chromium at {CHROMIUM}: install it with `apt-get install -y chromium`")
    if importlib.util.find_spec("playwright") is None:
        _unavailable("playwright is not installed: `pip install playwright` (no browser download)")


@contextmanager
def chromium() -> Iterator[Any]:
    """A launched headless Chromium (a Playwright `Browser`), closed on exit."""
    from playwright import sync_api

    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=BROWSER_ARGS)
        try:
            yield launched
        finally:
            launched.close()


# Also reported by the page itself: Chromium's console line names the directive only.
_CSP_WATCH = """document.addEventListener("securitypolicyviolation", (e) => console.error(
  `securitypolicyviolation: ${e.effectiveDirective} blocked ${e.blockedURI || "inline"} ` +
  `at ${e.sourceFile}:${e.lineNumber}`));"""


def csp_violations(context: Any) -> list[str]:
    """Every Content-Security-Policy violation the pages of a Playwright browser context
    report from now on (the browser's console line and the `securitypolicyviolation` event)."""
    found: list[str] = []
    context.add_init_script(_CSP_WATCH)

    def seen(message: Any) -> None:
        text = message.text
        if "Content Security Policy" in text or text.startswith("securitypolicyviolation"):
            found.append(text)

    context.on("console", seen)
    return found


@contextmanager
def watched_page(browser: Any, **options: Any) -> Iterator[Any]:
    """A page in a fresh 1400x1000 context (`options`: more of Playwright's `new_context`
    arguments) that fails the test on a script error or a Content-Security-Policy violation."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, **options)
    violations = csp_violations(context)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    yield opened
    context.close()
    assert errors == [], errors
    assert violations == [], violations

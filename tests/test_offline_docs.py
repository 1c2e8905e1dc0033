"""The API docs work offline (issue 15): /docs (Swagger UI) and /redoc of the results API
(`streameval results-api`) and of the Core's control API (`streameval core-api`), each its
real process, open in headless Chromium with every request to another host aborted, and show
every operation of the API's schema. Their assets come from the installed package, and the
pages' Content-Security-Policy keeps them from reaching any other origin.

Needs chromium and Playwright (tests/browser.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from streameval.core.store.store import Store
from tests.browser import chromium, csp_violations, require_browser
from tests.servers import Served, served, streameval_command

require_browser()
pytestmark = pytest.mark.timeout(180)
TOKEN = "offline-docs-test-token-0123456789"
LOCAL_HOSTS = ("127.0.0.1", "localhost")
# ReDoc's menu shows Redocly's logo from its CDN, whatever its options: the pages' CSP blocks it.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


@pytest.fixture(scope="module")
def results_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path_factory.mktemp('results') / 'store.db'}"
    Store(url).close()  # the results API opens an existing store only
    with served(streameval_command("results-api", "--store", url, "--port", "0")) as server:
        yield server


@pytest.fixture(scope="module")
def core_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = f"sqlite:///{tmp_path_factory.mktemp('core') / 'store.db'}"
    env = {**os.environ, "STREAMEVAL_API_TOKEN": TOKEN, "STREAMEVAL_API_DOCS": "1"}
    with served(streameval_command("core-api", "--store", url, "--port", "0"), env) as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(params=["results", "core"])
def api(request: pytest.FixtureRequest) -> Served:
    return request.getfixturevalue(f"{request.param}_api")


@dataclass
class Visit:
    """A page cut off from every host but this machine, and what it tried."""

    page: Any
    elsewhere: list[str] = field(default_factory=list)  # requests for another host
    answered: list[str] = field(default_factory=list)  # URLs that got a response
    broken: list[str] = field(default_factory=list)  # local responses of 400 or more
    errors: list[str] = field(default_factory=list)  # uncaught script errors
    violations: list[str] = field(default_factory=list)  # of the pages' security policy


def leaves_the_machine(url: str) -> bool:
    parts = urlsplit(url)  # blob: and data: URLs never leave the page
    return parts.scheme in ("http", "https", "ws", "wss") and parts.hostname not in LOCAL_HOSTS


@contextmanager
def offline(browser: Any) -> Iterator[Visit]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})

    def route(route: Any) -> None:
        if leaves_the_machine(route.request.url):
            route.abort("internetdisconnected")
        else:
            route.continue_()

    context.route("**/*", route)
    violations = csp_violations(context)
    visit = Visit(context.new_page(), violations=violations)
    visit.page.on("request", lambda r: leaves_the_machine(r.url) and visit.elsewhere.append(r.url))
    visit.page.on("response", lambda r: visit.answered.append(r.url))
    visit.page.on("response", lambda r: r.status >= 400 and visit.broken.append(r.url))
    visit.page.on("pageerror", lambda error: visit.errors.append(str(error)))
    try:
        yield visit
    finally:
        context.close()


def operations(api: Served) -> list[dict[str, str]]:
    """Every operation of the API's schema (method, path, summary, operationId), by path."""
    schema = httpx.get(f"{api.url}/openapi.json").json()
    found = [
        {"method": method.upper(), "path": path, "summary": op["summary"], "id": op["operationId"]}
        for path, item in schema["paths"].items()
        for method, op in item.items()
    ]
    return sorted(found, key=lambda op: (op["path"], op["method"]))


def test_the_schemas_document_real_endpoints(results_api: Served, core_api: Served) -> None:
    shown = {(op["method"], op["path"], op["summary"]) for op in operations(results_api)}
    assert {("GET", "/runs", "Runs"), ("GET", "/runs/{run_id}", "Run")} <= shown
    shown = {(op["method"], op["path"], op["summary"]) for op in operations(core_api)}
    assert {("POST", "/runs", "Start Run"), ("GET", "/adapters", "List Adapters")} <= shown


def test_swagger_ui_lists_every_operation_offline(api: Served, browser: Any) -> None:
    expected = [{k: op[k] for k in ("method", "path", "summary")} for op in operations(api)]
    with offline(browser) as visit:
        visit.page.goto(f"{api.url}/docs")
        visit.page.wait_for_selector(".opblock", timeout=30_000)
        listed = visit.page.eval_on_selector_all(
            ".opblock",
            """blocks => blocks.map(b => ({
                method: b.querySelector('.opblock-summary-method').innerText,
                path: b.querySelector('.opblock-summary-path').dataset.path,
                summary: b.querySelector('.opblock-summary-description').innerText,
            }))""",
        )
        assert sorted(listed, key=lambda op: (op["path"], op["method"])) == expected
        assert visit.page.locator(".opblock").first.is_visible()
        assert (visit.elsewhere, visit.broken, visit.errors) == ([], [], [])
        assert visit.violations == []  # the page satisfies its policy
        assert f"{api.url}/docs-assets/swagger-ui-bundle.js" in visit.answered


def test_redoc_renders_every_operation_offline(api: Served, browser: Any) -> None:
    expected = {f"operation/{op['id']}" for op in operations(api)}
    with offline(browser) as visit:
        visit.page.goto(f"{api.url}/redoc")
        visit.page.wait_for_selector('[data-section-id^="operation/"]', timeout=30_000)
        shown = visit.page.eval_on_selector_all(
            '[data-section-id^="operation/"]', "all => all.map(s => s.dataset.sectionId)"
        )
        assert set(shown) == expected
        headings = visit.page.eval_on_selector_all(
            '[data-section-id^="operation/"] h2', "all => all.map(h => h.innerText)"
        )
        assert sorted(headings) == sorted(op["summary"] for op in operations(api))
        # Nothing reached another host: the one attempt (Redocly's logo) got no response.
        assert set(visit.elsewhere) <= {REDOC_LOGO}
        assert [url for url in visit.elsewhere if url in visit.answered] == []
        assert (visit.broken, visit.errors) == ([], [])
        # The policy's one refusal: that logo (the browser's line and the page's event).
        assert all(REDOC_LOGO in line for line in visit.violations), visit.violations
        assert f"{api.url}/docs-assets/redoc.standalone.js" in visit.answered

"""The causality audit's badge on the run page, in headless Chromium (tests/browser.py), over
the results API served by `streameval results-api` and a store filled by two real audits:
the reference adapter (pass) and the peeking adapter (fail, with evidence)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from tests.browser import chromium, csp_violations, require_browser
from tests.servers import served, streameval_command
from tests.test_dashboard_browser import open_page

require_browser()
pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parent.parent


def audit(url: str, cache: Path, store: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "audit", "causality", "--adapter-url", url]
        + ["--cache-dir", str(cache), "--store", store, "--json"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict, dict]]:
    """The store URL and the two audits' verdicts (each with its run id)."""
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the adapter process imports tests.*
    cache = tmp_path_factory.mktemp("audit-cache")
    store = f"sqlite:///{tmp_path_factory.mktemp('audit-store') / 'store.db'}"
    try:
        with AdapterProcess("reference") as adapter:
            passed = audit(adapter.url, cache, store)
        options = {"store": store}  # the peeking adapter looks its videos up there
        with AdapterProcess("tests.peeking_adapter:PeekingAdapter", options=options) as adapter:
            failed = audit(adapter.url, cache, store)
        yield store, passed, failed
    finally:
        monkeypatch.undo()


@pytest.fixture(scope="module")
def server(audited: tuple[str, dict, dict]) -> Iterator[str]:
    with served(streameval_command("results-api", "--store", audited[0], "--port", "0")) as api:
        yield api.url


@pytest.fixture
def page(server: str) -> Iterator[object]:
    with chromium() as browser:
        opened = browser.new_page(viewport={"width": 1400, "height": 1000})
        violations = csp_violations(opened.context)  # the evidence is styled by style.css
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        yield opened
        assert errors == [], errors
        assert violations == [], violations


def test_a_passing_audit_shows_a_pass_badge_and_no_evidence(page, server, audited) -> None:
    _, passed, _ = audited
    assert passed["verdict"] == "pass"
    open_page(page, server, f"#/runs/{passed['runs']['A']}")
    badge = page.locator('h1 [data-audit="causality"] .badge')
    assert badge.inner_text() == "causality: pass"
    assert badge.get_attribute("data-verdict") == "pass"
    title = badge.get_attribute("title")
    assert title == (
        f"cut T = 12 s, marker {passed['marker']}: 23 decision points before T compared over "
        "45 sessions; 0 differ between A and B, 0 between A and A+, 0 outputs within a group, "
        "0 name the marker, 0 sessions failed; rule: 3 repeats, P(fail | honest, p ≤ 0.02) "
        "≤ 7.4e-4"
    )
    assert page.locator("h1 .audit-evidence").count() == 0


def test_a_failed_audit_shows_its_evidence(page, server, audited) -> None:
    _, _, failed = audited
    assert failed["verdict"] == "fail"
    open_page(page, server, f"#/runs/{failed['runs']['A+']}")
    badge = page.locator('h1 [data-audit="causality"] .badge')
    assert badge.inner_text() == "causality: fail"
    assert "failed" in badge.get_attribute("class")  # red, as a failed run
    page.click("h1 .audit-evidence summary")
    lines = page.locator("h1 .audit-evidence li").all_inner_texts()
    first = failed["evidence"][0]
    sessions = first["sessions"]
    assert len(lines) == len(failed["evidence"]) == 23
    assert lines[0] == (
        f"differs: qa-word, question at 11 s: A ({sessions['A']}): {first['outputs']['A']} · "
        f"B ({sessions['B']}): {first['outputs']['B']}"
    )
    assert len(sessions["A"].split(", ")) == len(sessions["B"].split(", ")) == 3
    assert lines[0] in badge.get_attribute("title")

"""The run page's robustness section in a real headless browser (tests/browser.py), against
`streameval results-api` (a real uvicorn process) over a SQLite store holding the hand-built
robustness run of tests/test_scorer_robustness.py and a plain run; then the same section in a
static report (`streameval report --html`) opened without a server."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from streameval.core.store.store import Store
from tests.browser import chromium, require_browser, watched_page
from tests.servers import served, streameval_command
from tests.test_scorer_robustness import CONDITION, DROP, store_robustness_run

require_browser()
pytestmark = pytest.mark.timeout(300)

from tests.test_dashboard_browser import (  # noqa: E402 (after the browser check)
    help_text,
    open_page,
    table_cells,
    wait_ready,
)

ROBUST, PLAIN = "robust", "plain"


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('robustness') / 'store.db'}"
    with Store(url) as store:
        store_robustness_run(store, ROBUST, CONDITION.model_dump(mode="json"))
        store_robustness_run(store, PLAIN, None)
    return url


@pytest.fixture(scope="module")
def server(store_url: str) -> Iterator[str]:
    with served(streameval_command("results-api", "--store", store_url, "--port", "0")) as api:
        yield api.url


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser) -> Iterator[object]:
    with watched_page(browser) as opened:
        yield opened


def check_section(page) -> None:
    """The variants with their parameters and seed, the false-alarm rate per hour, and every
    metric per variant with its difference to clean (numbers of test_scorer_robustness)."""
    assert page.inner_text('[data-section="robustness"] h2') == "Robustness"
    conditions = table_cells(page, f"robustness-conditions-{ROBUST}")
    assert conditions == [
        [DROP, "perturbation", "p=0.5", "11"],
        ["negative", "negative", "", "11"],
    ]
    rate = '[data-metric="negative_streams.false_alarms_per_hour"]'
    assert page.inner_text(f"{rate} .value") == "450"
    assert page.inner_text(f"{rate} .sub").startswith("[400, 480]")
    rows = {(row[0], row[1]): row[2:] for row in table_cells(page, f"robustness-{ROBUST}")}
    assert rows["qa", "accuracy"] == ["1", "0 (-1)"]
    assert rows["proactive", "in_window_accuracy"] == ["1", "0.6667 (-0.3333)"]
    assert rows["proactive", "miss_rate"] == ["0", "0.3333 (+0.3333)"]
    assert rows["workload", "submitted_images"] == ["–", "–"]
    headers = page.eval_on_selector_all(
        f'[data-table="robustness-{ROBUST}"] thead th', "ths => ths.map(th => th.innerText)"
    )
    assert headers == ["family", "metric", "clean", DROP]


def test_the_run_page_shows_each_variant_beside_clean(page, server: str, api_help) -> None:
    open_page(page, server, f"#/runs/{ROBUST}")
    check_section(page)
    title = page.get_attribute('[data-metric="negative_streams.false_alarms_per_hour"]', "title")
    assert title == help_text(api_help["negative_streams", "false_alarms_per_hour"])


def test_a_run_without_variants_has_no_robustness_section(page, server: str) -> None:
    open_page(page, server, f"#/runs/{PLAIN}")
    assert page.locator('[data-section="robustness"]').count() == 0
    assert page.locator("h2", has_text="By task type").count() == 1


def test_the_static_report_shows_the_section_offline(browser, store_url, tmp_path) -> None:
    import typer

    from streameval.scorer.service.cli import report

    app = typer.Typer()
    app.command()(report)
    out = tmp_path / "report.html"
    written = CliRunner().invoke(app, [ROBUST, "--html", str(out), "--store", store_url])
    assert written.exit_code == 0, written.output
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    reached: list[str] = []
    page.route(
        re.compile(r"^https?://"), lambda route: (reached.append(route.request.url), route.abort())
    )
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(out.as_uri())
    wait_ready(page)
    check_section(page)
    assert reached == [] and errors == []
    context.close()


@pytest.fixture(scope="module")
def api_help(server: str) -> dict[tuple[str | None, str], dict]:
    entries = httpx.get(f"{server}/metrics/help", timeout=30).json()
    return {(e["family"], e["name"]): e for e in entries}

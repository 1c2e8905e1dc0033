"""The dashboard's table for a paper, in headless Chromium (tests/browser.py), over the
results API served by `streameval results-api` and a store filled by the real runs of
tests/table_runs.py: runs picked on the Runs page, the text shown, copied and downloaded is
the text scorer/paper_table.py renders (and `streameval table` prints) for each option."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streameval.cli import app
from streameval.core.store.store import Store
from streameval.scorer.paper_table import paper_table, render_table
from tests.browser import chromium, csp_violations, require_browser
from tests.servers import served, streameval_command
from tests.table_runs import table_runs
from tests.test_dashboard_browser import downloaded, open_page, screenshot, wait_ready

require_browser()
pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    env = {
        **os.environ,
        "STREAMEVAL_CACHE_DIR": str(tmp_path_factory.getbasetemp() / "streameval-cache"),
        "PYTHONPATH": str(REPO),  # the adapter process imports tests.*
    }
    url = f"sqlite:///{tmp_path_factory.mktemp('table-store') / 'store.db'}"
    return url, table_runs(url, env)


@pytest.fixture(scope="module")
def server(runs: tuple[str, list[str]]) -> Iterator[str]:
    with served(streameval_command("results-api", "--store", runs[0], "--port", "0")) as api:
        yield api.url


@pytest.fixture
def page(server: str) -> Iterator[object]:
    with chromium() as browser:
        context = browser.new_context(
            viewport={"width": 1400, "height": 1000},
            accept_downloads=True,
            permissions=["clipboard-read", "clipboard-write"],
        )
        violations = csp_violations(context)
        opened = context.new_page()
        errors: list[str] = []
        opened.on("pageerror", lambda error: errors.append(str(error)))
        yield opened
        context.close()
        assert errors == [], errors
        assert violations == [], violations


def rendered(url: str, run_ids: list[str], fmt: str, **options) -> str:
    with Store(url, read_only=True) as store:
        return render_table(paper_table(store, run_ids, **options), fmt)


def shown_text(page) -> str:
    return page.eval_on_selector("pre.paper-table", "pre => pre.textContent")


def test_runs_picked_on_the_runs_page_make_the_table_the_command_prints(page, server, runs):
    url, run_ids = runs
    picked = [run_ids[2], run_ids[0]]  # in the order picked, the rows' order
    open_page(page, server, "#/")
    assert page.is_disabled('[data-action="paper-table"]')
    for run_id in picked:
        page.check(f'input[data-run="{run_id}"]')
    page.click('[data-action="paper-table"]')
    wait_ready(page)
    assert shown_text(page) == rendered(url, picked, "markdown")
    assert "| **1** |" in shown_text(page)  # the reference's QA accuracy, the column's best

    page.select_option('select[data-option="format"]', "latex")
    wait_ready(page)
    page.check('input[data-option="intervals"]')
    wait_ready(page)
    page.select_option('select[data-option="by"]', "task_type")
    wait_ready(page)
    latex = rendered(url, picked, "latex", by="task_type", intervals=True)
    assert shown_text(page) == latex
    command = f"streameval table {' '.join(picked)} --format latex --profile trace-paper-v1"
    assert page.inner_text("[data-command]") == f"{command} --by task_type --intervals"
    # The command the page shows prints the same text.
    words = page.inner_text("[data-command]").split()[2:]  # after `streameval table`
    printed = CliRunner().invoke(app, ["table", *words, "--store", url])
    assert printed.stdout == latex
    screenshot(page, "paper-table-latex.png", full_page=True)

    page.click('[data-action="copy-table"]')
    page.wait_for_selector("[data-status]:has-text('copied')")
    assert page.evaluate("navigator.clipboard.readText()") == latex
    name, content = downloaded(page, '[data-action="download-table"]')
    assert (name, content.decode()) == (f"table-{picked[0]}-{picked[1]}.tex", latex)


def test_a_pasted_address_shows_the_same_table_and_a_bad_metric_says_why(page, server, runs):
    url, run_ids = runs
    query = f"runs={','.join(run_ids)}&format=csv&metrics=qa.accuracy,false_alarm_rate"
    open_page(page, server, f"#/table?{query}&profile=trace-strict")
    expected = rendered(
        url,
        run_ids,
        "csv",
        metrics=["qa.accuracy", "false_alarm_rate"],
        scoring_profile="trace-strict",
    )
    assert shown_text(page) == expected
    assert page.input_value('input[data-option="metrics"]') == "qa.accuracy,false_alarm_rate"
    # A refused metric is said under the controls, which stay to correct it.
    page.fill('input[data-option="metrics"]', "bogus")
    page.press('input[data-option="metrics"]', "Enter")
    wait_ready(page)
    assert "profile trace-strict reports no metric 'bogus'" in page.inner_text("#app")
    assert page.query_selector("pre.paper-table") is None
    page.fill('input[data-option="metrics"]', "")
    page.press('input[data-option="metrics"]', "Enter")
    wait_ready(page)
    assert shown_text(page) == rendered(url, run_ids, "csv", scoring_profile="trace-strict")

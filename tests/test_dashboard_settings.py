"""Adapter settings in the dashboard (issue 34, item 3), in a real headless browser
(tests/browser.py) against `streameval results-api` over a SQLite store holding two real runs
of the reference adapter that differ only in `-A work_width` (tests/test_adapter_settings.py):
the run page lists the run's settings, and the comparison shows the differing setting
before the metrics."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser import require_browser
from tests.servers import served, streameval_command

require_browser()
pytestmark = pytest.mark.timeout(300)

from tests import test_dashboard_robustness as robustness  # noqa: E402
from tests.test_adapter_settings import NARROW, WIDE, store_two_runs  # noqa: E402
from tests.test_dashboard_browser import open_page, table_cells  # noqa: E402

# The headless browser, and a page that fails a test on a script error or a CSP violation.
browser, page = robustness.browser, robustness.page


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    return store_two_runs(tmp_path_factory.mktemp("dashboard-settings"))


@pytest.fixture(scope="module")
def server(two_runs) -> Iterator[str]:
    store = two_runs[0]
    with served(streameval_command("results-api", "--store", store, "--port", "0")) as api:
        yield api.url


def headings(page) -> list[str]:
    return page.eval_on_selector_all(".page h2", "hs => hs.map(h => h.innerText.trim())")


def test_the_run_page_lists_the_adapter_settings(page, server, two_runs) -> None:
    _store, wide, narrow = two_runs
    for run_id, width in ((wide, WIDE), (narrow, NARROW)):
        open_page(page, server, f"#/runs/{run_id}")
        assert table_cells(page, f"settings-{run_id}") == [["work_width", str(width)]]
        shown = headings(page)
        assert shown.index("Adapter settings") < shown.index("Declared conditions")


def test_the_comparison_shows_the_differing_setting_before_the_metrics(
    page, server, two_runs
) -> None:
    _store, wide, narrow = two_runs
    open_page(page, server, f"#/compare?runs={wide},{narrow}")
    assert table_cells(page, f"settings-{wide}-{narrow}") == [
        ["work_width", str(WIDE), str(NARROW)]
    ]
    shown = headings(page)
    assert shown[0] == "Adapter settings that differ"
    assert shown.index("Adapter settings that differ") < shown.index(
        "Metric differences (paired by record, 95% bootstrap intervals)"
    )
    # Against itself nothing differs, and the table says so.
    open_page(page, server, f"#/compare?runs={wide},{wide}")
    assert table_cells(page, f"settings-{wide}-{wide}") == [["no adapter setting differs"]]

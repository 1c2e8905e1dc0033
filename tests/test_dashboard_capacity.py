"""A capacity search's run page in a real headless browser (tests/test_dashboard_browser.py's
harness: Debian's chromium driven by Playwright, `streameval results-api` in its own process).

The search is a real one (tests/test_capacity.py's load adapter, 0.5 s x sessions open to the
first token) under `ttft_p95=1.25,lag_p99=1`: levels 1 and 2 pass, 4 and then 3 break it,
so the knee is 2. The page must draw each level at its place, the SLO as a line between
the last passing and the first failing level, and the knee where the curve crosses it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser import require_browser
from tests.servers import served, streameval_command
from tests.test_capacity import Search, capacity_search

require_browser()
from tests.test_dashboard_browser import (  # noqa: E402 (needs the browser check first)
    browser,  # noqa: F401 (a fixture)
    open_page,
    page,  # noqa: F401 (a fixture)
    screenshot,
    shown,
    table_cells,
)

pytestmark = pytest.mark.timeout(240)
KNEE = 2


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> Search:
    return capacity_search(
        tmp_path_factory.mktemp("capacity"), "ttft_p95=1.25,lag_p99=1", start=1, most=8
    )


@pytest.fixture(scope="module")
def server(search: Search) -> Iterator[str]:
    with served(
        streameval_command("results-api", "--store", search.store_url, "--port", "0")
    ) as api:
        yield api.url


def point_centres(view, chart: str) -> dict[int, tuple[float, float, str]]:
    """sessions -> (x, y, passed) of each drawn level of a chart (circles: the first series)."""
    found = view.eval_on_selector_all(
        f'[data-chart="{chart}"] .point',
        "dots => dots.map(d => [+d.dataset.sessions, +d.getAttribute('cx'),"
        " +d.getAttribute('cy'), d.dataset.passed])",
    )
    return {sessions: (x, y, passed) for sessions, x, y, passed in found}


def test_the_curve_the_slo_and_the_knee_show(page, server: str, search: Search) -> None:  # noqa: F811
    result = search.result
    assert (result["capacity"], result["first_failing"]) == (KNEE, KNEE + 1)
    open_page(page, server, f"#/runs/{result['run_id']}")
    answer = page.locator(".capacity-answer")
    assert answer.get_attribute("data-capacity") == str(KNEE)
    assert answer.inner_text().startswith("2 sessions at once meet the SLO (3 break it) · SLO")

    ttft = point_centres(page, "capacity-ttft_p95_s")
    assert {n: passed for n, (_, _, passed) in ttft.items()} == {
        1: "true",
        2: "true",
        3: "false",
        4: "false",
    }
    xs = [ttft[n][0] for n in (1, 2, 3, 4)]
    assert xs == sorted(xs) and xs[1] - xs[0] == pytest.approx(xs[3] - xs[2])
    ys = [ttft[n][1] for n in (1, 2, 3, 4)]
    assert ys == sorted(ys, reverse=True)  # TTFT grows with the sessions (SVG y points down)
    slo = page.locator('[data-chart="capacity-ttft_p95_s"] .slo-line')
    assert slo.get_attribute("data-limit") == "1.25"
    slo_y = float(slo.get_attribute("y1"))
    assert ttft[2][1] > slo_y > ttft[3][1]  # between the last passing and first failing
    knee = page.locator('[data-chart="capacity-ttft_p95_s"] .knee')
    assert knee.get_attribute("data-sessions") == str(KNEE)
    assert float(knee.get_attribute("x1")) == pytest.approx(ttft[KNEE][0])

    lag = page.locator('[data-chart="capacity-lag_p99_s"] .slo-line')
    assert lag.get_attribute("data-limit") == "1"
    assert len(point_centres(page, "capacity-lag_p99_s")) == 4

    rows = table_cells(page, "capacity-levels")
    points = result["points"]
    assert [row[0] for row in rows] == ["1", "2", "3", "4"]
    assert [row[1] for row in rows] == [p["run_id"] for p in points]
    assert [row[3] for row in rows] == [shown(p["metrics"]["ttft_p95_s"]) for p in points]
    assert [row[8] for row in rows] == [shown(float(p["sessions"])) for p in points]  # server
    headers = page.eval_on_selector_all(
        '[data-table="capacity-levels"] th', "cells => cells.map(c => c.innerText.trim())"
    )
    assert "QA accuracy" in headers and "in-window accuracy" not in headers  # QA only
    assert [row[-1] for row in rows[:2]] == ["meets", "meets"]
    assert rows[3][-1] == f"breaks: ttft_p95 {points[3]['metrics']['ttft_p95_s']:.4g} > 1.25"
    assert page.locator('[data-chart="capacity-failed_rate"]').count() == 0  # none failed
    screenshot(page, "capacity-run.png", full_page=True)

    # A level is an ordinary run: its page has no capacity section.
    page.click(f'[data-table="capacity-levels"] a[href="#/runs/{points[0]["run_id"]}"]')
    page.wait_for_selector(f"h1:has-text('Run {points[0]['run_id']}')")
    assert page.locator(".capacity-answer").count() == 0

"""The dashboard in a real headless browser: Debian's chromium driven by Playwright, against
the results API served by `streameval results-api` (a real uvicorn process) over a SQLite
store filled by real runs: `streameval demo` (the reference adapter), the `always` baseline
served by `streameval adapter serve`, a wall-clock run still in progress for the live
view, and two QA runs of an adapter that reports a workload but answers every question with
its first option (tests/dashboard_adapters.py): 16 records with an accuracy interval, and one
record, without. Numbers on the pages are checked against `streameval demo --json` and the API;
screenshots land in tests/artifacts/.

Needs chromium and Playwright (tests/browser.py); without them these tests skip and say so,
or fail where STREAMEVAL_REQUIRE_BROWSER is set (CI).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from tests.browser import chromium, csp_violations, require_browser, watched_page
from tests.servers import served, streameval_command

require_browser()
# The module's runs (about 30 s on 2 cores) are set up inside the first test's time.
pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "tests" / "artifacts"
PROFILE = "trace-paper-v1"


def streameval(*args: str, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def shown(value: float | None) -> str:
    """How the dashboard prints a number: 4 significant digits, no exponent, no trailing 0."""
    if value is None:
        return "–"
    if float(value).is_integer():
        return str(int(value))
    return np.format_float_positional(float(f"{value:.4g}"), trim="-")


def shown_ci(ci: list[float] | None) -> str:
    return "–" if ci is None else f"[{shown(ci[0])}, {shown(ci[1])}]"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Runs:
    """The store and the runs the tests look at."""

    def __init__(
        self, url: str, demo: dict, baseline: str, live: str, guess: str, single: str
    ) -> None:
        self.url = url
        self.demo = demo
        self.demo_id = demo["run_id"]
        self.baseline_id = baseline
        self.live_id = live
        self.guess_id = guess  # 16 QA records, a workload, an accuracy between 0 and 1
        self.single_id = single  # the same adapter on one QA record: no interval

    @property
    def all_ids(self) -> set[str]:
        return {self.demo_id, self.baseline_id, self.live_id, self.guess_id, self.single_id}


def _wait_for_new_run(url: str, known: set[str], timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Store(url) as store:
            fresh = [r.run_id for r in store.list_runs() if r.run_id not in known]
            if fresh and store.sessions(fresh[0]):
                return fresh[0]
        time.sleep(0.2)
    raise AssertionError("the live run never appeared in the store")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    env = {
        **os.environ,
        # The same folder conftest's autouse fixture gives every test of this session.
        "STREAMEVAL_CACHE_DIR": str(tmp_path_factory.getbasetemp() / "streameval-cache"),
    }
    url = f"sqlite:///{tmp_path_factory.mktemp('dashboard') / 'store.db'}"
    demo = streameval("demo", "--json", "--store", url, env=env)
    with AdapterProcess("always") as adapter:
        # A slow run for the live view: wall-clock pacing, two proactive records (~35 s).
        live = subprocess.Popen(
            [sys.executable, "-m", "streameval.cli", "run", "--adapter-url", adapter.url]
            + ["--pacing", "wall_clock", "--task", "proactive", "--limit", "2", "--json"]
            + ["--store", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
        )
        try:
            live_id = _wait_for_new_run(url, {demo["run_id"]})
            baseline = streameval(
                "run", "--adapter-url", adapter.url, "--json", "--store", url, env=env
            )
            with AdapterProcess("tests.dashboard_adapters:FirstOptionReference") as guessing:
                qa = ["run", "--adapter-url", guessing.url, "--task", "qa", "--json"]
                guess = streameval(*qa, "--store", url, env=env)
                single = streameval(*qa, "--limit", "1", "--store", url, env=env)
            yield Runs(url, demo, baseline["run_id"], live_id, guess["run_id"], single["run_id"])
        finally:
            live.terminate()
            live.wait(timeout=30)


@pytest.fixture(scope="module")
def server(runs: Runs) -> Iterator[str]:
    with served(streameval_command("results-api", "--store", runs.url, "--port", "0")) as api:
        yield api.url


@pytest.fixture(scope="module")
def api(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser, server: str) -> Iterator[object]:
    # The dashboard satisfies its own policy: a violation fails the test.
    with watched_page(browser, accept_downloads=True) as opened:
        yield opened


def test_the_policy_refuses_what_it_should_and_the_watch_reports_it(browser, server) -> None:
    """The violation watch every page fixture asserts on is live: an inline style attribute
    set on a dashboard page is refused and reported; the dashboard cannot be framed."""
    context = browser.new_context()
    violations = csp_violations(context)
    page = context.new_page()
    open_page(page, server, "#/")
    page.evaluate("document.body.setAttribute('style', 'background: rgb(255, 0, 0)')")
    for _ in range(300):  # console messages arrive on their own: up to 30 s
        if any("style-src-attr blocked inline" in line for line in violations):
            break
        page.wait_for_timeout(100)
    assert any("style-src-attr blocked inline" in line for line in violations), violations
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") != "rgb(255, 0, 0)"

    framing = context.new_page()  # another origin (about:blank) frames the dashboard
    framing.set_content(f'<iframe src="{server}/ui/"></iframe>', wait_until="load")
    assert framing.frames[1].query_selector("#app") is None  # nothing of the dashboard loaded
    context.close()


def open_page(page, server: str, fragment: str) -> None:
    page.goto(f"{server}/ui/{fragment}")
    wait_ready(page)


def wait_ready(page) -> None:
    # A click only changes the hash; until the router runs, the page being left is still
    # there, ready. Each page is marked once seen, so this waits for the one navigated to.
    fresh = ".page[data-ready]:not([data-seen])"
    page.wait_for_selector(fresh, timeout=30_000)
    assert page.get_attribute(fresh, "data-ready") == "true", page.inner_text("#app")
    page.eval_on_selector(fresh, "view => view.setAttribute('data-seen', '')")


def table_cells(page, name: str) -> list[list[str]]:
    return page.eval_on_selector_all(
        f'[data-table="{name}"] tbody tr',
        "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))",
    )


def downloaded(page, selector: str) -> tuple[str, bytes]:
    with page.expect_download() as info:
        page.click(selector)
    download = info.value
    return download.suggested_filename, Path(download.path()).read_bytes()


def screenshot(target, name: str, **options) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    target.screenshot(path=str(ARTIFACTS / name), **options)


def axis_of(figure):
    """Video time -> x on a drawn timeline, from the axis the SVG declares."""
    a = {k: float(figure.get_attribute(f"data-{k}")) for k in ("t0", "t1", "x0", "x1")}
    return lambda t: a["x0"] + (t - a["t0"]) / (a["t1"] - a["t0"]) * (a["x1"] - a["x0"])


def rid(record_id: str) -> str:
    return record_id.replace(":", "%3A")


# --------------------------------------------------------------------------- the tests


def test_live_view_shows_a_run_in_progress(page, server: str, runs: Runs, api) -> None:
    open_page(page, server, f"#/runs/{runs.live_id}/live")
    # Polled once a second: the rate appears from the second poll on.
    page.wait_for_function(
        """() => {
            const card = document.querySelector('[data-metric="events-per-s"] .value');
            return card && Number(card.textContent) > 0;
        }""",
        timeout=15_000,
    )
    progress = api.get(f"/runs/{runs.live_id}/progress").json()
    assert progress["status"] == "running" and progress["sessions_total"] == 2
    done = page.inner_text('[data-metric="done"] .value')
    assert re.fullmatch(r"[0-2] / 2", done), done
    assert page.inner_text('[data-metric="running"] .value') in ("1", "2")
    running_rows = table_cells(page, f"running-{runs.live_id}")
    assert {row[0] for row in running_rows} <= {
        "synthetic:proactive:000",
        "synthetic:proactive:001",
    }
    # Which machine and worker run each session: the plain run's one in-process worker.
    (worker,) = progress["workers"]
    assert {row[3] for row in running_rows} == {worker["host"]}
    assert {row[4] for row in running_rows} == {worker["worker_id"]}
    workers_rows = table_cells(page, f"workers-{runs.live_id}")
    assert [row[:2] for row in workers_rows] == [[worker["worker_id"], worker["host"]]]
    assert page.inner_text(f'[data-table="workers-{runs.live_id}"] .title') == "1 worker"
    assert singular_after_one(page) == []
    # Each part of the progress bar is as wide as its share of the sessions: its width is set
    # through the CSSOM, which the page's policy allows (an inline style attribute it refuses).
    shares = page.eval_on_selector(
        ".progress-bar",
        """bar => [...bar.children].map(part => [
            Number(part.title.split(" ")[0]), part.getBoundingClientRect().width / bar.clientWidth,
        ])""",
    )
    assert sum(count for count, _ in shares) >= 1
    assert [width for _, width in shares] == pytest.approx([c / 2 for c, _ in shares], abs=0.01)
    events = int(page.inner_text('[data-metric="events"] .value'))
    time.sleep(1.5)  # the page polls again: the count grows while the run streams
    assert int(page.inner_text('[data-metric="events"] .value')) > events
    screenshot(page, "live-view.png", full_page=True)


def test_run_list_shows_runs_with_their_declared_conditions(page, server, runs, api) -> None:
    open_page(page, server, "#/")
    rows = {row[1].split("\n")[0]: row for row in table_cells(page, "runs")}
    assert set(rows) == runs.all_ids
    listed = {run["run_id"]: run for run in api.get("/runs").json()["items"]}
    for run_id, cells in rows.items():
        adapter = listed[run_id]["conditions"]["adapters"][0]
        conditions = adapter["conditions"]
        assert cells[1].split("\n")[1] == listed[run_id]["benchmark"]
        assert cells[4] == f"{adapter['adapter']} ({conditions['model_name']})"
        assert cells[5] == (
            f"{conditions['state']} · {conditions['initiation']}\n"
            f"{conditions['boundary']} · {conditions['deployment']}"
        )
    assert rows[runs.demo_id][4] == "reference (reference-pixel-policy)"
    assert rows[runs.demo_id][5].startswith("native · polled")
    assert rows[runs.baseline_id][5].startswith("non-native · polled")
    assert rows[runs.live_id][6] == "trace · wall clock ×1 · 1 fps"
    accuracy = runs.demo["metrics"]["overall"]["qa"]["accuracy"]["value"]
    headers = page.eval_on_selector_all(
        '[data-table="runs"] th', "ths => ths.map(t => t.innerText)"
    )
    assert rows[runs.demo_id][headers.index("QA accuracy")] == shown(accuracy)
    # How many records each run's numbers stand on, beside them.
    counts = {run_id: cells[headers.index("records")] for run_id, cells in rows.items()}
    for run_id, count in counts.items():
        assert count == str(api.get(f"/runs/{run_id}/metrics").json()["records_scored"])
    ids = [runs.demo_id, runs.baseline_id, runs.live_id, runs.guess_id, runs.single_id]
    assert [counts[run_id] for run_id in ids] == ["20", "20", "2", "16", "1"]
    screenshot(page, "runs.png", full_page=True)


def test_run_page_shows_the_scored_numbers(page, server, runs) -> None:
    metrics = runs.demo["metrics"]  # what `streameval demo --json` printed
    open_page(page, server, f"#/runs/{runs.demo_id}")
    overall = table_cells(page, f"metrics-{runs.demo_id}-{PROFILE}")
    expected = [
        [
            family,
            name,
            shown(m["value"]),
            shown_ci(m["ci95"]),
            f"{m['population']} {m['unit']}",
            str(m["observed"]),
            shown(m["coverage"]),
        ]
        for family, values in metrics["overall"].items()
        for name, m in values.items()
    ]
    assert overall == expected
    card = page.inner_text('[data-metric="in_window_accuracy"]')
    in_window = metrics["overall"]["proactive"]["in_window_accuracy"]
    assert shown(in_window["value"]) in card and shown_ci(in_window["ci95"]) in card
    # Per task type: one row per type, each cell the value, its interval and n with coverage.
    by_type = table_cells(page, f"by-task-type-qa-{runs.demo_id}")
    qa_types = {k: v["qa"] for k, v in metrics["by_task_type"].items() if "qa" in v}
    assert [row[0] for row in by_type] == list(qa_types)
    for row in by_type:
        accuracy = qa_types[row[0]]["accuracy"]
        assert row[1].split("\n") == [
            shown(accuracy["value"]),
            shown_ci(accuracy["ci95"]),
            f"n={accuracy['population']} · cov {shown(accuracy['coverage'])}",
        ]
    records = table_cells(page, f"records-{runs.demo_id}")
    assert len(records) == metrics["records_scored"] == 20
    screenshot(page, "run.png", full_page=True)


def test_exports_download_the_tables_raw_values(page, server, runs, api) -> None:
    open_page(page, server, f"#/runs/{runs.demo_id}")
    table = f'[data-table="metrics-{runs.demo_id}-{PROFILE}"]'
    name, data = downloaded(page, f"{table} [data-export=csv]")
    assert name == f"metrics-{runs.demo_id}-{PROFILE}.csv"
    lines = list(csv.DictReader(io.StringIO(data.decode())))
    metrics = api.get(f"/runs/{runs.demo_id}/metrics").json()["overall"]
    assert len(lines) == sum(len(values) for values in metrics.values())
    for line in lines:
        m = metrics[line["family"]][line["metric"]]
        assert (float(line["value"]) if line["value"] else None) == m["value"]
        assert int(line["population"]) == m["population"]
        if m["ci95"] is not None:
            assert [float(line["ci_low"]), float(line["ci_high"])] == m["ci95"]
    name, data = downloaded(page, f'[data-table="records-{runs.demo_id}"] [data-export=json]')
    exported = json.loads(data)
    records = api.get(f"/runs/{runs.demo_id}/records").json()["items"]
    assert [r["record_id"] for r in exported] == [r["record_id"] for r in records]
    assert [r["ttft_s"] for r in exported] == [r["qa"] and r["qa"]["ttft_s"] for r in records]


def test_record_timeline_draws_windows_and_responses_where_they_happened(
    page, server, runs, api
) -> None:
    record_id = "synthetic:proactive:000"
    timeline = api.get(f"/runs/{runs.demo_id}/records/{record_id}/timeline").json()
    assert len(timeline["windows"]) >= 2 and len(timeline["episodes"]) >= 2
    thumbnails: list[tuple[int, str]] = []
    page.on(
        "response",
        lambda r: "/frames/" in r.url and thumbnails.append((r.status, r.headers["content-type"])),
    )
    open_page(page, server, f"#/runs/{runs.demo_id}/records/{rid(record_id)}")
    page.wait_for_load_state("networkidle")
    figure = page.locator("svg.timeline")
    x_of = axis_of(figure)
    axis = {k: float(figure.get_attribute(f"data-{k}")) for k in ("t0", "t1")}

    times = [f["t"] for f in timeline["frames"]] + [w["end"] for w in timeline["windows"]]
    assert axis["t0"] <= min(times) and max(times) <= axis["t1"]
    windows = figure.locator("rect.window")
    assert windows.count() == len(timeline["windows"])
    for i, window in enumerate(timeline["windows"]):
        rect = windows.nth(i)
        assert float(rect.get_attribute("x")) == pytest.approx(x_of(window["start"]), abs=0.01)
        width = x_of(window["end"]) - x_of(window["start"])
        assert float(rect.get_attribute("width")) == pytest.approx(width, abs=0.01)
        assert rect.get_attribute("data-assignment") == window["assignment"]
    responses = figure.locator("circle.response")
    answered = [e for e in timeline["episodes"] if e["onset_t"] is not None]
    assert responses.count() == len(answered)
    for i, episode in enumerate(answered):
        circle = responses.nth(i)
        assert float(circle.get_attribute("cx")) == pytest.approx(
            x_of(episode["onset_t"]), abs=0.01
        )
        assert circle.get_attribute("data-response-id") == episode["response_id"]
        expected = "in-window" if episode["assignment"] == "in_window" else None
        assert circle.get_attribute("data-kind") == expected
    ticks = figure.locator("line.frame-tick")
    assert ticks.count() == len(timeline["frames"])
    last = timeline["frames"][-1]
    assert float(ticks.nth(len(timeline["frames"]) - 1).get_attribute("x1")) == pytest.approx(
        x_of(last["t"]), abs=0.01
    )
    # Thumbnails from the run's frame cache, each at its frame's time.
    images = figure.locator("image.frame-thumb")
    assert images.count() >= 5
    first = images.nth(1)
    assert float(first.get_attribute("x")) == pytest.approx(
        x_of(float(first.get_attribute("data-t"))), abs=0.01
    )
    assert thumbnails and all(t == (200, "image/jpeg") for t in thumbnails)
    screenshot(page.locator(".timeline-box"), "record-timeline.png")
    screenshot(page, "record.png", full_page=True)

    name, svg_text = downloaded(page, "[data-figure=timeline] [data-export=svg]")
    assert name == "timeline-" + runs.demo_id + "-synthetic_proactive_000.svg"
    assert svg_text.count(b'class="window ') == len(timeline["windows"])
    assert b'href="data:image/jpeg;base64,' in svg_text  # the saved SVG carries its images
    name, png = downloaded(page, "[data-figure=timeline] [data-export=png]")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width = int.from_bytes(png[16:20], "big")
    assert width == 2 * 1200  # twice the SVG's width

    # Zoomed on the second window: the same marks, on the narrower axis.
    window = timeline["windows"][1]
    page.fill("[data-range=from]", str(window["start"] - 1))
    page.fill("[data-range=to]", str(window["end"] + 1))
    page.click("[data-action=zoom]")
    figure = page.locator("svg.timeline")
    assert float(figure.get_attribute("data-t0")) == window["start"] - 1
    x_of = axis_of(figure)
    rect = figure.locator("rect.window").nth(1)
    assert float(rect.get_attribute("x")) == pytest.approx(x_of(window["start"]), abs=0.01)
    assert float(rect.get_attribute("width")) == pytest.approx(
        x_of(window["end"]) - x_of(window["start"]), abs=0.01
    )
    # A click on the response that answered it picks out its line in the responses table.
    figure.locator(f'circle[data-response-id="{window["response_id"]}"]').click()
    highlighted = page.locator("tr.highlight")
    assert highlighted.get_attribute("data-row") == f"response-{window['response_id']}"


def test_navigation_between_runs_and_records(page, server, runs) -> None:
    open_page(page, server, "#/")
    page.click(f'a[href="#/runs/{runs.demo_id}"]')
    wait_ready(page)
    assert page.inner_text("h1").startswith(f"Run {runs.demo_id}")
    page.click(f'a[href="#/runs/{runs.demo_id}/records/{rid("synthetic:qa:004")}"]')
    wait_ready(page)
    assert page.inner_text("h1").startswith("synthetic:qa:004")
    assert page.inner_text('[data-metric="qa-correct"] .value') == "correct"
    page.click("[data-link=next]")
    wait_ready(page)
    assert page.inner_text("h1").startswith("synthetic:qa:005")
    page.go_back()
    wait_ready(page)
    assert page.inner_text("h1").startswith("synthetic:qa:004")
    page.click(".crumbs a >> nth=1")
    wait_ready(page)
    assert page.inner_text("h1").startswith(f"Run {runs.demo_id}")


def test_two_runs_are_compared_record_by_record(page, server, runs, api) -> None:
    open_page(page, server, "#/")
    page.check(f'input[data-run="{runs.demo_id}"]')
    page.check(f'input[data-run="{runs.baseline_id}"]')
    page.click("[data-action=compare]")
    wait_ready(page)
    comparison = api.get(
        "/compare", params={"run_a": runs.demo_id, "run_b": runs.baseline_id}
    ).json()
    differences = table_cells(page, f"compare-{runs.demo_id}-{runs.baseline_id}-{PROFILE}")
    by_metric = {(row[0], row[1]): row for row in differences}
    for family, metric in [("qa", "accuracy"), ("proactive", "false_alarm_rate")]:
        d = comparison["overall"][family][metric]
        assert by_metric[family, metric][2:6] == [
            shown(d["a"]),
            shown(d["b"]),
            shown(d["diff"]),
            shown_ci(d["ci95"]),
        ]
    # Paired records, from each run's per-record results.
    outcome = {}
    for run_id in (runs.demo_id, runs.baseline_id):
        for r in api.get(f"/runs/{run_id}/records").json()["items"]:
            if r["qa"]:
                value = 1.0 if r["qa"]["correct"] else 0.0
            else:
                value = r["proactive"]["score_sum"] / len(r["proactive"]["windows"])
            outcome[run_id, r["record_id"]] = value
    ids = sorted({record for _, record in outcome})
    pairs = [(outcome[runs.demo_id, i], outcome[runs.baseline_id, i]) for i in ids]
    expected = {
        "both_right": sum(a == b == 1 for a, b in pairs),
        "a_better": sum(a > b for a, b in pairs),
        "b_better": sum(b > a for a, b in pairs),
        "both_wrong": sum(a == b == 0 for a, b in pairs),
    }
    assert expected["a_better"] > 0  # the always baseline loses records the reference wins
    cards = f'[data-pair="{runs.baseline_id}"]'
    for key, count in expected.items():
        assert page.inner_text(f'{cards} [data-count="{key}"] .value') == str(count)
    page.check("[data-filter=differs]")
    differing = table_cells(page, f"paired-records-{runs.demo_id}-{runs.baseline_id}")
    assert len(differing) == sum(a != b for a, b in pairs)
    assert page.locator('[data-chart="compare-false_alarm_rate"] rect.bar').count() == 2
    # Whether they differ, readably: yes / no, not true / false.
    cells = page.eval_on_selector_all("table.data td", "tds => tds.map(td => td.innerText.trim())")
    assert "true" not in cells and "false" not in cells
    page.uncheck("[data-filter=differs]")
    paired = table_cells(page, f"paired-records-{runs.demo_id}-{runs.baseline_id}")
    assert [row[-1] for row in paired] == ["yes" if a != b else "no" for a, b in pairs]
    conditions = table_cells(page, f"conditions-{runs.demo_id}-{runs.baseline_id}")
    differing = [row[-1] == "yes" for row in conditions]
    assert differing == [row[1] != row[2] for row in conditions] and any(differing)
    screenshot(page, "compare.png", full_page=True)


def test_static_report_opens_without_a_server(browser, runs, tmp_path) -> None:
    import typer
    from typer.testing import CliRunner

    from streameval.scorer.service.cli import report
    from streameval.scorer.service.dashboard.help import metric_help

    app = typer.Typer()
    app.command()(report)
    out = tmp_path / "report.html"
    written = CliRunner().invoke(
        app, [runs.demo_id, "--html", str(out), "--thumbnails", "--store", runs.url]
    )
    assert written.exit_code == 0, written.output
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page = context.new_page()
    reached: list[str] = []

    def refuse(route) -> None:
        reached.append(route.request.url)
        route.abort()

    page.route(re.compile(r"^https?://"), refuse)
    console_errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
    page.goto(out.as_uri())
    wait_ready(page)
    metrics = runs.demo["metrics"]["overall"]
    overall = {(r[0], r[1]): r for r in table_cells(page, f"metrics-{runs.demo_id}-{PROFILE}")}
    # The glossary travels with the report: metric names keep their hover text offline.
    (qa_accuracy,) = [e for e in metric_help() if (e.family, e.name) == ("qa", "accuracy")]
    title = page.eval_on_selector_all(
        f'[data-table="metrics-{runs.demo_id}-{PROFILE}"] tbody tr',
        """rows => rows
            .find(r => r.cells[0].innerText === 'qa' && r.cells[1].innerText === 'accuracy')
            .querySelector('.metric-name').title""",
    )
    assert title == help_text(qa_accuracy.model_dump())
    assert overall["qa", "accuracy"][2] == shown(metrics["qa"]["accuracy"]["value"])
    assert overall["proactive", "median_response_delay_runtime_s"][3] == shown_ci(
        metrics["proactive"]["median_response_delay_runtime_s"]["ci95"]
    )
    page.click(f'a[href="#/runs/{runs.demo_id}/records/{rid("synthetic:proactive:001")}"]')
    wait_ready(page)
    assert page.locator("svg.timeline rect.window").count() == 5
    assert page.locator("svg.timeline image.frame-thumb").count() >= 5
    name, data = downloaded(page, '[data-table^="responses-"] [data-export=csv]')
    assert data.decode().startswith("response_id,onset_t,onset_s,final_s,generation_s,text")
    assert reached == [] and console_errors == []
    screenshot(page, "static-report-record.png", full_page=True)
    context.close()


# ------------------------------------------------------------ the first hour (issue 15)


def boxes(page, selector: str) -> list[dict[str, float]]:
    return page.eval_on_selector_all(
        selector,
        """els => els.map(e => {
            const r = e.getBoundingClientRect();
            return {x: r.x, y: r.y, width: r.width, height: r.height};
        })""",
    )


def intersect(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def help_text(entry: dict) -> str:
    """The hover text the dashboard builds from a `GET /metrics/help` entry."""
    return (
        f"{entry['name']}: {entry['meaning']}\n"
        f"unit: {entry['unit'] or 'none'} · scale: {entry['scale']}"
    )


def test_runs_page_fits_1400_px_without_horizontal_scrolling(page, server, runs) -> None:
    open_page(page, server, "#/")
    assert len(table_cells(page, "runs")) == len(runs.all_ids)
    widths = page.evaluate(
        """() => {
            const wrap = document.querySelector('[data-table="runs"] .table-wrap');
            const root = document.documentElement;
            return {
                page: [root.scrollWidth, root.clientWidth],
                table: [wrap.scrollWidth, wrap.clientWidth],
            };
        }"""
    )
    assert widths["page"][0] <= widths["page"][1], widths
    assert widths["table"][0] <= widths["table"][1], widths


def test_the_profile_is_in_the_url_and_a_pasted_url_shows_the_same_view(
    page, browser, server, runs, api
) -> None:
    open_page(page, server, f"#/runs/{runs.demo_id}")
    # The router writes the profile shown into the address, the default one included.
    assert page.url == f"{server}/ui/#/runs/{runs.demo_id}?profile={PROFILE}"
    page.select_option("#profile", "readiness")
    wait_ready(page)
    url = f"{server}/ui/#/runs/{runs.demo_id}?profile=readiness"
    assert page.url == url
    chosen = table_cells(page, f"metrics-{runs.demo_id}-readiness")
    readiness = api.get(f"/runs/{runs.demo_id}/metrics", params={"profile": "readiness"}).json()
    acc_e = readiness["overall"]["readiness"]["acc_e"]["value"]
    assert ["readiness", "acc_e", shown(acc_e)] in [row[:3] for row in chosen]

    # Pasted into a browser that never chose a profile: the same profile and numbers.
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        pasted = context.new_page()
        pasted.goto(url)
        wait_ready(pasted)
        assert pasted.input_value("#profile") == "readiness"
        heading = pasted.locator("h2", has_text="Metrics ·").inner_text()
        assert heading.startswith("Metrics · readiness v")
        assert table_cells(pasted, f"metrics-{runs.demo_id}-readiness") == chosen
        # A link inside the page leads on under the same profile.
        pasted.click(".crumbs a >> nth=0")
        wait_ready(pasted)
        assert pasted.url == f"{server}/ui/#/?profile=readiness"
        assert "metrics under readiness" in pasted.inner_text('[data-table="runs"] .title')
    finally:
        context.close()


def test_quality_chart_labels_never_overlap(page, server, runs, api) -> None:
    open_page(page, server, "#/")
    chart = '[data-chart="runs-quality-vs-workload"]'
    # The points the chart should draw: a quality metric and a workload, per run.
    expected = []
    for run in api.get("/runs").json()["items"]:
        overall = api.get(f"/runs/{run['run_id']}/metrics").json()["overall"]
        if overall.get("workload", {}).get("submitted_images", {}).get("value") is None:
            continue
        for family, metric in [("qa", "accuracy"), ("proactive", "in_window_accuracy")]:
            if overall.get(family, {}).get(metric, {}).get("value") is not None:
                expected.append(run["run_id"])
    # The reference run's QA and proactive accuracies are both 1: two points in one spot,
    # whose labels would smear into one another.
    assert expected == [runs.single_id, runs.guess_id, runs.demo_id, runs.demo_id]
    points = page.eval_on_selector_all(
        f"{chart} .point",
        "ps => ps.map(p => [p.dataset.label, p.querySelector('title').textContent])",
    )
    assert sorted(label for label, _ in points) == sorted(expected)
    assert all(title.startswith(f"{label} · ") for label, title in points)  # hover labels
    labels = boxes(page, f"{chart} text.point-label")
    texts = page.eval_on_selector_all(
        f"{chart} text.point-label", "ts => ts.map(t => t.textContent)"
    )
    assert sorted(texts) == sorted(set(expected))  # the run in one spot twice, named once
    unlabelled = page.get_attribute(f"{chart} [data-unlabelled]", "data-unlabelled")
    assert len(labels) + int(unlabelled) == len(points)
    markers = boxes(page, f"{chart} .point, {chart} .error-bar")
    for i, label in enumerate(labels):
        assert not any(intersect(label, other) for other in labels[i + 1 :]), labels
        assert not any(intersect(label, marker) for marker in markers), (label, markers)


def test_favicon_is_served_and_the_pages_request_nothing_missing(page, server, runs, api) -> None:
    icon = api.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.content.startswith(b"<svg ")
    failed: list[str] = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.on("console", lambda m: m.type == "error" and failed.append(m.text))
    open_page(page, server, "#/")
    linked = page.eval_on_selector('link[rel="icon"]', "link => link.href")
    assert linked == f"{server}/ui/favicon.svg"
    assert api.get("/ui/favicon.svg").content == icon.content
    open_page(page, server, f"#/runs/{runs.demo_id}")
    open_page(page, server, f"#/runs/{runs.demo_id}/records/{rid('synthetic:qa:004')}")
    page.wait_for_load_state("networkidle")
    assert failed == []


def test_metric_names_carry_their_meaning_from_the_api(page, server, runs, api) -> None:
    entries = api.get("/metrics/help").json()
    glossary = {(e["family"], e["name"]): help_text(e) for e in entries}
    open_page(page, server, f"#/runs/{runs.demo_id}?profile=readiness")
    table = f'[data-table="metrics-{runs.demo_id}-readiness"]'
    hover = page.eval_on_selector_all(
        f"{table} tbody tr",
        "rows => rows.map(r => [r.cells[0].innerText, r.cells[1].innerText,"
        " r.cells[1].querySelector('[title]').title])",
    )
    metrics = api.get(f"/runs/{runs.demo_id}/metrics", params={"profile": "readiness"}).json()
    assert [row[:2] for row in hover] == [
        [family, name] for family, values in metrics["overall"].items() for name in values
    ]
    for family, name, title in hover:
        assert title == glossary[family, name]
    # One name, two meanings: each row has its own family's.
    titles = {(family, name): title for family, name, title in hover}
    assert titles["qa", "accuracy"] != titles["readiness", "accuracy"]
    for key, column in [("ci95", "95% CI"), ("coverage", "coverage")]:
        assert (
            page.get_attribute(f'{table} th[data-key="{key}"]', "title") == glossary[None, column]
        )
    by_type = f'[data-table="by-task-type-proactive-{runs.demo_id}"]'
    assert (
        page.get_attribute(f'{by_type} th[data-key="miss_rate"]', "title")
        == glossary["proactive", "miss_rate"]
    )

    # The run list's metric columns and the chart axes across runs.
    open_page(page, server, "#/")
    header = page.get_attribute('[data-table="runs"] th[data-key="qa_accuracy"]', "title")
    assert header == glossary["qa", "accuracy"]
    chart = '[data-chart="runs-quality-vs-workload"] svg'
    axes = page.eval_on_selector_all(
        f"{chart} text.axis-label, {chart} text.legend",
        "ts => ts.map(t => [t.firstChild.textContent, t.querySelector('title').textContent])",
    )
    assert axes[0] == ["submitted images per record", glossary["workload", "submitted_images"]]
    assert axes[2:] == [
        ["QA accuracy", glossary["qa", "accuracy"]],
        ["proactive in-window accuracy", glossary["proactive", "in_window_accuracy"]],
    ]
    assert axes[1][1] == "\n\n".join(help for _, help in axes[2:])
    title = page.get_attribute('[data-chart="runs-false_alarm_rate"] .title', "title")
    assert title == glossary["proactive", "false_alarm_rate"]


def test_judge_line_says_no_judge_was_called_for_exact_matching(page, server, runs, api) -> None:
    judge = api.get(f"/runs/{runs.demo_id}/metrics").json()["judge"]
    assert (judge["kind"], judge["calls"]) == ("exact", 0) and judge["unique"] > 0
    open_page(page, server, f"#/runs/{runs.demo_id}")
    assert page.inner_text('[data-metric="judge"]').split("\n") == [
        "judge",
        "none (exact match)",
        f"no judge calls · {judge['unique']} answers compared",
    ]


# ------------------------------------------------------------ first contact (issue 30)

# A count of one followed by a plural noun ("1 workers", "n=1 records").
ONE_PLURAL = re.compile(
    r"(?<![\d.,])1 (?:[a-z-]+ )?(?:workers|runs|records|windows|sessions|events|calls|answers"
    r"|targets|frames|images|points|episodes|steps|tokens)\b"
)


def singular_after_one(page) -> list[str]:
    """Every "1 <plural>" on the page: a count of one takes the singular."""
    return ONE_PLURAL.findall(page.inner_text("body"))


def test_quality_chart_draws_each_runs_interval_as_an_error_bar(page, server, runs, api) -> None:
    open_page(page, server, "#/")
    chart = '[data-chart="runs-quality-vs-workload"]'
    expected = {}
    for run_id in (runs.single_id, runs.guess_id, runs.demo_id):
        overall = api.get(f"/runs/{run_id}/metrics").json()["overall"]
        for family, metric, series in [
            ("qa", "accuracy", "QA accuracy"),
            ("proactive", "in_window_accuracy", "proactive in-window accuracy"),
        ]:
            if metric in overall.get(family, {}):
                expected[run_id, series] = overall[family][metric]["ci95"]
    # One record is one video: no interval there; 16 records answered A: a real one.
    assert expected[runs.single_id, "QA accuracy"] is None
    low, high = expected[runs.guess_id, "QA accuracy"]
    assert low < high
    bars = page.eval_on_selector_all(
        f"{chart} .error-bar",
        """gs => gs.map(g => {
            const r = g.getBoundingClientRect();
            return {label: g.dataset.label, series: g.dataset.series, low: Number(g.dataset.low),
                    high: Number(g.dataset.high), top: r.top, bottom: r.bottom};
        })""",
    )
    drawn = {(bar["label"], bar["series"]): [bar["low"], bar["high"]] for bar in bars}
    assert len(drawn) == len(bars)
    assert drawn == {key: ci for key, ci in expected.items() if ci is not None}
    # The bar spans its interval on the axis: the point (the accuracy) lies inside it.
    points = page.eval_on_selector_all(
        f"{chart} .point",
        """ps => ps.map(p => {
            const r = p.getBoundingClientRect();
            return [p.dataset.label, p.dataset.series, (r.top + r.bottom) / 2];
        })""",
    )
    centre = {(label, series): y for label, series, y in points}
    (bar,) = [b for b in bars if (b["label"], b["series"]) == (runs.guess_id, "QA accuracy")]
    assert bar["top"] < centre[runs.guess_id, "QA accuracy"] < bar["bottom"]
    assert bar["bottom"] - bar["top"] > 20  # [0, 0.16] of a 0-1 axis about 240 px tall
    title = page.eval_on_selector(
        f'{chart} .point[data-label="{runs.single_id}"] title', "t => t.textContent"
    )
    assert title.endswith(" · no 95% interval")


@pytest.mark.parametrize("profile", [PROFILE, "realstream"])
def test_run_page_tables_fit_1400_px(page, server, runs, profile) -> None:
    open_page(page, server, f"#/runs/{runs.demo_id}?profile={profile}")
    widths = page.evaluate(
        """() => {
            const root = document.documentElement;
            const slices = [...document.querySelectorAll(
                '[data-table^="by-task-type-"], [data-table^="by-source-"]')];
            return {
                page: [root.scrollWidth, root.clientWidth],
                slices: slices.map(block => {
                    const wrap = block.querySelector('.table-wrap');
                    return [block.dataset.table, wrap.scrollWidth, wrap.clientWidth];
                }),
            };
        }"""
    )
    assert widths["page"][0] <= widths["page"][1], widths
    assert len(widths["slices"]) >= 5
    assert [s for s in widths["slices"] if s[1] > s[2]] == []
    # Wrapped at its underscores only: the header still reads as the metric's name.
    header = page.inner_text(f'[data-table="by-task-type-workload-{runs.demo_id}"] thead')
    assert "unique_submitted_frames" in header.replace("\n", "")


def test_timeline_labels_stay_inside_the_plot_and_off_the_evidence(page, server, runs, api):
    records = api.get(f"/runs/{runs.demo_id}/records").json()["items"]
    checked = 0
    for record in records:
        open_page(page, server, f"#/runs/{runs.demo_id}/records/{rid(record['record_id'])}")
        svg = "svg.timeline"
        (plot,) = boxes(page, f'{svg} rect.lane[data-lane="responses"]')
        labels = boxes(page, f"{svg} text.task-label, {svg} text.response-label")
        assert labels, record["record_id"]
        for label in labels:
            inside = plot["x"] - 0.5 <= label["x"]
            inside = inside and label["x"] + label["width"] <= plot["x"] + plot["width"] + 0.5
            assert inside, (record["record_id"], label, plot)
        evidence = boxes(page, f"{svg} rect.evidence, {svg} path.anchor")
        (task,) = boxes(page, f"{svg} text.task-label")
        assert not any(intersect(task, mark) for mark in evidence), (record["record_id"], task)
        responses = boxes(page, f"{svg} text.response-label")
        for i, label in enumerate(responses):
            assert not any(intersect(label, other) for other in responses[i + 1 :])
        checked += bool(evidence)
    # QA records mark their evidence; a question at the end of its video sat on it.
    assert checked == sum(r["task"] == "qa" for r in records) > 0


def test_counts_of_one_are_singular(page, server, runs, api) -> None:
    open_page(page, server, f"#/runs/{runs.single_id}")
    accuracy = api.get(f"/runs/{runs.single_id}/metrics").json()["overall"]["qa"]["accuracy"]
    assert (accuracy["population"], accuracy["unit"]) == (1, "records")
    overall = {(r[0], r[1]): r for r in table_cells(page, f"metrics-{runs.single_id}-{PROFILE}")}
    assert overall["qa", "accuracy"][4] == "1 record"
    assert page.inner_text(f'[data-table="records-{runs.single_id}"] .title') == "1 record"
    assert singular_after_one(page) == []
    record = api.get(f"/runs/{runs.single_id}/records").json()["items"][0]["record_id"]
    open_page(page, server, f"#/runs/{runs.single_id}/records/{rid(record)}")
    assert singular_after_one(page) == []
    open_page(page, server, "#/")
    assert singular_after_one(page) == []

"""`streameval report RUN --html FILE`: one self-contained file holding what the results API
serves for the run. (The browser test opens such a file with the network cut off.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from streameval.core.store.store import Store
from streameval.scorer.service.api import create_app
from streameval.scorer.service.cli import report
from streameval.scorer.service.dashboard import STATIC_DIR
from streameval.scorer.service.html_report import report_data
from tests.test_scorer_report import mixed_run

HOSTILE = "</script><script>alert(1)</script>"


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        # A model answer that would end an inlined <script> if it were not escaped.
        mixed_run(store, "run-a", answers=("B", HOSTILE, ""))
    return url


def embedded(html: str) -> dict:
    match = re.search(
        r'<script type="application/json" id="streameval-report">(.*?)</script>', html, re.S
    )
    assert match is not None
    return json.loads(match.group(1))


def invoke(*args: str):
    app = typer.Typer()
    app.command()(report)
    return CliRunner().invoke(app, list(args))


def test_the_report_holds_what_the_api_serves(url: str) -> None:
    with Store(url) as store:
        data = report_data(store, "run-a")
    with TestClient(create_app(url)) as api:
        run = api.get("/runs/run-a").json()
        assert data["run"] == run
        assert data["metrics"] == api.get("/runs/run-a/metrics").json()
        # The proactive records are all on one video: no interval; the QA ones on two.
        overall = data["metrics"]["overall"]
        assert overall["proactive"]["in_window_accuracy"]["ci95"] is None
        assert overall["qa"]["accuracy"]["ci95"] == [0.0, 0.5]
        records = api.get("/runs/run-a/records").json()["items"]
        assert data["records"] == records
        assert set(data["timelines"]) == {r["record_id"] for r in records}
        for record_id, timeline in data["timelines"].items():
            assert timeline == api.get(f"/runs/run-a/records/{record_id}/timeline").json()
            annotation = api.get(f"/runs/run-a/records/{record_id}/annotation").json()
            assert data["annotations"][record_id] == annotation
        assert data["profiles"] == [api.get("/profiles").json()[0]]
    assert data["profile"] == "trace-paper-v1" and data["videos"] == {}


def test_the_file_inlines_every_asset_and_escapes_the_data(url: str, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = invoke("run-a", "--html", str(out), "--store", url)
    assert done.exit_code == 0, done.output
    assert f"wrote {out}: 5 records, 5 timelines, frames of 0 videos" in done.stderr
    html = out.read_text()
    assert "<script src=" not in html and "<link" not in html  # nothing to fetch
    for script in sorted((STATIC_DIR / "js").glob("*.js")):
        assert script.read_text() in html, script.name
    assert html.count("<script>") == len(list((STATIC_DIR / "js").glob("*.js")))
    assert HOSTILE not in html  # escaped, so the page's scripts stay intact
    data = embedded(html)
    predictions = [r["qa"]["prediction"] for r in data["records"] if r["qa"]]
    assert HOSTILE in predictions  # and still the model's exact answer
    assert "<title>streameval report · run run-a</title>" in html


def test_timelines_can_be_capped_and_thumbnails_skipped_when_frames_are_absent(
    url: str, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    done = invoke(
        "run-a", "--html", str(out), "--max-timelines", "2", "--thumbnails", "--store", url
    )
    assert done.exit_code == 0, done.output
    data = embedded(out.read_text())
    assert sorted(data["timelines"]) == sorted(r["record_id"] for r in data["records"])[:2]
    assert len(data["records"]) == 5
    assert data["videos"] == {}  # this run stored no image rules: no frames to embed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope", "--html", "{tmp}/r.html"], "unknown run id 'nope'"),
        (["run-a", "--html", "{tmp}/missing/r.html"], "cannot write {tmp}/missing/r.html"),
        (["run-a", "--html", "{tmp}/r.html", "--profile", "paper"], "unknown scoring profile"),
    ],
)
def test_mistakes_get_one_clear_line(url: str, tmp_path: Path, args, message) -> None:
    done = invoke(*[a.format(tmp=tmp_path) for a in args], "--store", url)
    assert done.exit_code == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert message.format(tmp=tmp_path) in lines[0]

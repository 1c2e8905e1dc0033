"""What the results API adds for the dashboard: the pages themselves, live progress, stored
benchmark records, and frame thumbnails read from a real frame cache."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.types import ImageRules
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.store import Store
from streameval.scorer.service.api import create_app
from streameval.scorer.service.dashboard import STATIC_DIR
from streameval.scorer.service.dashboard.progress import RateMeter
from tests.test_scorer_report import mixed_run
from tests.timeline_fixtures import PROACTIVE, QA, VIDEO_SECONDS

RULES = {"fps": 2.0, "max_width": 32, "jpeg_quality": 90}


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture
def client(url: str) -> Iterator[TestClient]:
    with Store(url) as store:
        mixed_run(store, "run-a")
    with TestClient(create_app(url)) as test_client:
        yield test_client


def test_the_dashboard_is_served_with_every_asset(client: TestClient) -> None:
    home = client.get("/", follow_redirects=False)
    assert home.status_code == 307 and home.headers["location"] == "ui/"
    page = client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assets = re.findall(r'(?:src|href)="((?:js/)?[\w.-]+\.(?:js|css))"', page.text)
    # Every script and style sheet of the folder is linked, once (favicon.svg is not matched).
    on_disk = ["style.css", *(f"js/{p.name}" for p in (STATIC_DIR / "js").glob("*.js"))]
    assert sorted(assets) == sorted(on_disk) and len(assets) == 16
    for asset in assets:
        assert client.get(f"/ui/{asset}").status_code == 200, asset


def test_favicon_is_the_dashboards_svg_icon(client: TestClient) -> None:
    icon = client.get("/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/svg+xml"
    assert icon.content == (STATIC_DIR / "favicon.svg").read_bytes()
    assert icon.content.startswith(b'<svg xmlns="http://www.w3.org/2000/svg"')
    assert '<link rel="icon" href="favicon.svg"' in client.get("/ui/").text


def test_progress_counts_sessions_and_measures_events_per_second(
    client: TestClient, url: str
) -> None:
    first = client.get("/runs/run-a/progress").json()
    with Store(url) as store:
        events = store.count_events("run-a")
    assert first["sessions"] == {"pending": 0, "running": 0, "finished": 4, "failed": 1}
    assert (first["sessions_total"], first["done"], first["events"]) == (5, 5, events)
    assert first["events_per_s"] is None  # one poll: no rate yet
    assert [s["session_id"] for s in first["failed"]] == ["qa-2"]
    assert first["failed"][0]["failure_stage"] == "response"
    assert first["running"] == []
    second = client.get("/runs/run-a/progress").json()
    assert second["events_per_s"] == 0.0  # nothing stored between the polls
    assert client.get("/runs/nope/progress").status_code == 404


def test_progress_says_which_worker_and_gpu_ran_each_session(url: str) -> None:
    with Store(url) as store:
        store.create_run("spread", benchmark="test@1", config={})
        store.add_sessions("spread", [(name, [name]) for name in ("a", "b", "c", "d")])
        node1 = SessionQueue(store, WorkerIdentity("node1:7:x", "node1"), lease_s=60)
        node2 = SessionQueue(store, WorkerIdentity("node2:9:y", "node2"), lease_s=60)
        for queue, outcome in ((node1, "finished"), (node2, "failed"), (node1, None)):
            session = queue.claim("spread")
            if outcome is not None:
                hello = {"adapter": "x", "gpu": f"H200 GPU-{queue.worker.host}"}
                store.set_session_status(
                    "spread", session.session_id, outcome, adapter=hello,
                    owner=queue.worker.worker_id,
                )  # fmt: skip
    with TestClient(create_app(url)) as client:
        progress = client.get("/runs/spread/progress").json()
    assert progress["workers"] == [
        {"worker_id": "node1:7:x", "host": "node1", "sessions": 2, "running": 1,
         "finished": 1, "failed": 0},
        {"worker_id": "node2:9:y", "host": "node2", "sessions": 1, "running": 0,
         "finished": 0, "failed": 1},
    ]  # fmt: skip
    (failed,) = progress["failed"]
    assert (failed["session_id"], failed["host"], failed["worker_id"], failed["gpu"]) == (
        "b", "node2", "node2:9:y", "H200 GPU-node2",
    )  # fmt: skip
    (running,) = progress["running"]
    assert (running["session_id"], running["host"], running["gpu"]) == ("c", "node1", None)


def test_rate_meter_averages_over_its_window_and_forgets_stale_counts() -> None:
    now = [0.0]
    meter = RateMeter(window_s=10.0, clock=lambda: now[0])
    assert meter.observe("r", 0) is None
    now[0] = 2.0
    assert meter.observe("r", 100) == 50.0
    now[0] = 12.0  # the sample at 0 s leaves the window; 2 s is the oldest one kept
    assert meter.observe("r", 600) == 50.0
    now[0] = 15.0
    assert meter.observe("r", 900) == pytest.approx((900 - 100) / 13)
    now[0] = 60.0  # nobody polled for 45 s: no rate until the next poll
    assert meter.observe("r", 900) is None
    now[0] = 61.0
    assert meter.observe("r", 1000) == 100.0
    assert meter.observe("other", 5) is None


def test_annotation_is_the_stored_benchmark_record(client: TestClient) -> None:
    annotation = client.get("/runs/run-a/records/qa-1/annotation").json()
    assert annotation["record_id"] == "qa-1" and annotation["task"] == "qa"
    assert "question" in annotation and "options" in annotation
    missing = client.get("/runs/run-a/records/nope/annotation")
    assert missing.status_code == 404 and "has no record 'nope'" in missing.json()["detail"]


def test_frames_of_a_run_without_image_rules_are_unavailable(client: TestClient) -> None:
    index = client.get("/runs/run-a/records/qa-1/frames").json()
    assert index["available"] is False and index["frames"] == []
    assert "run run-a stores no usable image rules" in index["reason"]
    frame = client.get("/runs/run-a/records/qa-1/frames/0")
    # Why is the index's to say (its reasons may name server paths), not a frame's.
    assert frame.status_code == 404
    assert frame.json()["detail"] == "frame 0 of record 'qa-1' is not available"
    assert client.get("/runs/run-a/records/nope/frames").status_code == 404


def _run_on(store: Store, run_id: str, config: dict) -> None:
    store.create_run(run_id, benchmark="test@1", config=config)
    store.add_records(run_id, [QA.model_dump(mode="json"), PROACTIVE.model_dump(mode="json")])


def test_thumbnails_come_from_the_runs_frame_cache(
    url: str, benchmark_path: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    config = {"benchmark": str(benchmark_path), "cache_dir": str(cache), **RULES}
    with Store(url) as store:
        _run_on(store, "run-v", config)
    # The Core's run filled the cache; the read-only API only reads it back.
    frames = FrameCache(cache / "frames").get(benchmark_path.parent / "v.mp4", ImageRules(**RULES))
    with TestClient(create_app(url)) as client:
        index = client.get("/runs/run-v/records/t:qa:1/frames").json()
        assert index["available"] is True and index["reason"] is None
        assert len(index["frames"]) == VIDEO_SECONDS * 2
        assert index["frames"][3] == {"index": 3, "t": 1.5, "width": 32, "height": 24}
        small = client.get("/runs/run-v/records/t:qa:1/frames/3", params={"width": 16})
        assert small.headers["content-type"] == "image/jpeg"
        assert "immutable" in small.headers["cache-control"]
        assert Image.open(io.BytesIO(small.content)).size == (16, 12)
        # At the run's own width or more, the very JPEG the Core sent.
        full = client.get("/runs/run-v/records/t:pro:1/frames/3", params={"width": 64})
        assert full.content == frames.read(frames.frames[3])
        unknown = client.get("/runs/run-v/records/nope/frames/0")
        assert unknown.json()["detail"] == "run 'run-v' has no record 'nope'"
        beyond = client.get("/runs/run-v/records/t:qa:1/frames/40")
        assert beyond.status_code == 404
        assert beyond.json()["detail"] == "no frame 40: the video has 40 samples"
        assert client.get("/runs/run-v/records/t:qa:1/frames/0?width=2").status_code == 422


def test_missing_videos_and_benchmarks_are_named_and_never_regenerated(
    url: str, benchmark_path: Path, tmp_path: Path
) -> None:
    (benchmark_path.parent / "v.mp4").unlink()
    cache = tmp_path / "cache"
    with Store(url) as store:
        _run_on(store, "gone", {"benchmark": str(benchmark_path), "cache_dir": str(cache), **RULES})
        _run_on(store, "synth", {"benchmark": "synthetic", "cache_dir": str(cache), **RULES})
    with TestClient(create_app(url)) as client:
        gone = client.get("/runs/gone/records/t:qa:1/frames").json()
        assert gone["reason"] == f"video {benchmark_path.parent / 'v.mp4'} is not on this machine"
        synth = client.get("/runs/synth/records/t:qa:1/frames").json()
        assert synth["available"] is False
        assert synth["reason"].startswith("benchmark of run synth cannot be read")
    assert not (cache / "synthetic").exists()  # a results viewer never generates a benchmark

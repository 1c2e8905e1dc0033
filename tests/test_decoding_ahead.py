"""Decoding ahead (core_server/run/decoding_ahead.py, frame_preparation.py): no session
waits for a video's decode once its worker's first video is decoded, and a run streams its
first session before its last video is decoded. Real PyAV videos, real adapter processes,
real SQLite stores; what is checked is the order of things (progress reports, the frame
cache's entries), never a speed.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path

from streameval.core.benchmark.records import Benchmark
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.frames.cache import FrameCache
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.decoding_ahead import OwnDecodes
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.progress import Phase
from tests.test_progress import Recorder
from tests.timeline_fixtures import QA, write_video

VIDEOS = ["a.mp4", "b.mp4", "c.mp4"]


def benchmark(root: Path) -> Path:
    """A session over each of three videos (6, 7 and 8 s: not one digest), in session-id
    order a0, b0, c0."""
    records = []
    for n, video in enumerate(VIDEOS):
        write_video(root / video, seconds=6 + n, fps=5)
        session = {"record_id": f"{video[0]}0", "source_id": f"{video[0]}0"}
        at = {"video_path": video, "question_time_s": 5.0, "evidence_anchor_s": 4.0}
        records.append(QA.model_copy(update={**session, **at}))
    path = root / "bench.json"
    path.write_text(
        Benchmark(
            name="ahead", version="1", video_root=str(root), records=records
        ).model_dump_json()
    )
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "streameval.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def detached_run(tmp_path: Path) -> tuple[str, Path, str]:
    """The benchmark's run, created for workers: its store URL, a frame cache, its id."""
    bench = benchmark(tmp_path / "videos")
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    created = cli("run", "--detach", "--json", "--benchmark", str(bench), "--store", store_url)
    assert created.returncode == 0, created.stderr
    return store_url, tmp_path / "cache", json.loads(created.stdout)["run_id"]


def work(store_url: str, run_id: str, adapter_url: str, cache: Path, decode_ahead: int) -> dict:
    """`streameval worker` on the run, one session at a time; its JSON summary."""
    done = cli(
        "worker", "--store", store_url, "--run", run_id, "--adapter-url", adapter_url,
        "--cache-dir", str(cache), "--decode-ahead", str(decode_ahead), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_worker_decodes_its_next_sessions_videos_while_its_first_streams(tmp_path, monkeypatch):
    store_url, cache, run_id = detached_run(tmp_path)
    # The adapter holds every session until the cache holds all three videos: only a worker
    # that decodes b and c while a's first session is held gets them there.
    monkeypatch.setenv("STREAMEVAL_TEST_CACHE", str(cache))
    monkeypatch.setenv("STREAMEVAL_TEST_ENTRIES", "3")
    with AdapterProcess("tests.wire_adapters:CacheWatchingAdapter") as adapter:
        summary = work(store_url, run_id, adapter.url, cache, decode_ahead=2)
    assert (summary["claimed"], summary["finished"]) == (3, 3)
    assert summary["first_video"] == "a.mp4"
    # Only the first session waited, for the worker's first video.
    assert [(w["session_id"], w["video"], w["claim"]) for w in summary["decode_waits"]] == [
        ("a0", "a.mp4", 1)
    ]
    assert summary["decode_waits"][0]["wait_s"] > 0


def test_without_decoding_ahead_each_new_video_makes_its_session_wait(tmp_path):
    store_url, cache, run_id = detached_run(tmp_path)
    with AdapterProcess("tests.wire_adapters:InstantAdapter") as adapter:
        waits = work(store_url, run_id, adapter.url, cache, decode_ahead=0)["decode_waits"]
    assert [(w["video"], w["claim"]) for w in waits] == [("a.mp4", 1), ("b.mp4", 2), ("c.mp4", 3)]


class HeldCache(FrameCache):
    """Decodes `held` only once `release` is set (at most 60 s later), then notes it."""

    def __init__(self, root: Path, held: str, release: threading.Event, notes: list) -> None:
        super().__init__(root)
        self.held, self.release, self.notes = held, release, notes

    def get(self, video_path, rules, on_progress=None, expect=None):
        if Path(video_path).name == self.held:
            self.release.wait(60)
        frames = super().get(video_path, rules, on_progress, expect)
        if Path(video_path).name == self.held:
            self.notes.append(("decoded", self.held))
        return frames


class ReleasingRecorder(Recorder):
    """A Recorder that sets `release` when the first session ends."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        super().advance(phase, done, failed)
        if phase == Phase.SESSIONS:
            self.release.set()


async def test_a_run_streams_its_first_session_before_its_last_video_is_decoded(tmp_path):
    bench = benchmark(tmp_path / "videos")
    release = threading.Event()
    recorder = ReleasingRecorder(release)
    with (
        AdapterProcess("tests.wire_adapters:InstantAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = RunConfig(
            benchmark=str(bench),
            endpoints=[EndpointConfig(url=adapter.url, concurrency=1)],
            cache_dir=str(tmp_path / "cache"),
        )
        executor = RunExecutor(config, store, recorder)
        executor.cache = HeldCache(
            tmp_path / "cache" / "frames", "c.mp4", release, recorder.reports
        )
        summary = await executor.start()
    assert (summary.finished, summary.failed) == (3, 0)
    reports = [r for r in recorder.reports if r[0] != "item"]
    first_ended = reports.index(("advance", Phase.SESSIONS, 1, 0))
    assert first_ended < reports.index(("decoded", "c.mp4"))
    # Both phases are whole: the frames phase counts its three videos and ends.
    assert recorder.of(Phase.FRAMES) == [
        ("start", Phase.FRAMES, 3),
        *[("advance", Phase.FRAMES, n, 0) for n in (1, 2, 3)],
        ("finish", Phase.FRAMES),
    ]
    assert summary.decode["first_video"] == "a.mp4"
    assert summary.decode["decode_waits"][0]["session_id"] == "a0"


def test_decoding_ahead_waits_while_a_session_waits_for_its_own_video() -> None:
    async def scenario() -> list[str]:
        own = OwnDecodes()
        seen: list[str] = []

        async def ahead() -> None:
            await own.none_left()
            seen.append("ahead")

        with own.one():
            with own.one():
                task = asyncio.create_task(ahead())
                await asyncio.sleep(0.05)
                seen.append("first own decode done")
            await asyncio.sleep(0.05)
            seen.append("second own decode done")
        await task
        return seen

    assert asyncio.run(scenario()) == ["first own decode done", "second own decode done", "ahead"]

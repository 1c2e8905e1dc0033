"""Progress of a run's phases (core_server/progress.py): the synthetic benchmark generated,
the frames prepared, the sessions streamed, then scoring for the demo.

A recorder stands where the terminal display would be and gets every report of real runs
against the reference adapter in its own process; the display itself is checked on a
rich console and, end to end, with `streameval demo` on a pseudo-terminal.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console

from streameval.core import frames as frames_module
from streameval.core.adapter_process import AdapterProcess
from streameval.core.benchmark.loader import synthetic_dir
from streameval.core.cli import execute
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.frames import FrameCache, ImageRules
from streameval.core.progress import Phase
from streameval.core.progress_display import TerminalProgress, WarningsOnly, progress_display
from streameval.core.store.store import Store
from tests.terminal import plain, read_terminal, sized_terminal

# The first ten synthetic records ask about the first three of its seven videos.
SESSIONS, VIDEOS_USED, VIDEOS_GENERATED = 10, 3, 7
PHASE_NAMES = [phase.value for phase in Phase]


class Recorder:
    """Every report, in order, as a tuple: (what, phase, numbers...)."""

    def __init__(self) -> None:
        self.reports: list[tuple] = []

    def start(self, phase: Phase, total: int | None) -> None:
        self.reports.append(("start", phase, total))

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        self.reports.append(("advance", phase, done, failed))

    def item(self, phase: Phase, name: str, done_s: float, total_s: float) -> None:
        self.reports.append(("item", phase, name, done_s, total_s))

    def finish(self, phase: Phase) -> None:
        self.reports.append(("finish", phase))

    def cached(self, phase: Phase, total: int) -> None:
        self.reports.append(("cached", phase, total))

    def warn(self, message: str) -> None:
        self.reports.append(("warn", message))

    def of(self, phase: Phase) -> list[tuple]:
        """This phase's reports, without the per-video ones (how many depends on speed)."""
        return [r for r in self.reports if r[0] != "item" and r[1] == phase]


def counted(phase: Phase, total: int) -> list[tuple]:
    """The reports of a phase that does `total` items without a failure."""
    advances = [("advance", phase, done, 0) for done in range(1, total + 1)]
    return [("start", phase, total), *advances, ("finish", phase)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Recorder, Recorder, Path]:
    """A cold run (empty cache: the benchmark is generated, the frames extracted), then a
    warm run on the same cache; both of the first ten synthetic records."""
    cache = tmp_path_factory.mktemp("progress-cache")
    recorders = (Recorder(), Recorder())
    with AdapterProcess("reference") as adapter, Store(f"sqlite:///{cache / 's.db'}") as store:
        config = RunConfig(
            benchmark="synthetic",
            limit=SESSIONS,
            endpoints=[EndpointConfig(url=adapter.url, concurrency=4)],
            cache_dir=str(cache),
        )
        for recorder in recorders:
            summary = execute(config, store, progress=recorder)
            assert (summary.finished, summary.failed) == (SESSIONS, 0)
    return *recorders, cache


def test_the_session_total_is_reported_before_the_first_session_ends(runs):
    cold, warm, _ = runs
    for recorder in (cold, warm):
        sessions = recorder.of(Phase.SESSIONS)
        assert sessions[0] == ("start", Phase.SESSIONS, SESSIONS)
        assert sessions == counted(Phase.SESSIONS, SESSIONS)


def test_a_cold_run_counts_the_videos_generated_then_those_prepared(runs):
    cold, _, _ = runs
    # One phase after the other, each counted to its total; no warning.
    assert [r for r in cold.reports if r[0] != "item"] == [
        *counted(Phase.BENCHMARK, VIDEOS_GENERATED),
        *counted(Phase.FRAMES, VIDEOS_USED),
        *counted(Phase.SESSIONS, SESSIONS),
    ]
    # Only videos being decoded report on their own (how often depends on the machine).
    used = {"videos/v0_colours.mp4", "videos/v1_digits.mp4", "videos/v2_no_triangle.mp4"}
    for _, phase, name, done_s, total_s in [r for r in cold.reports if r[0] == "item"]:
        assert phase == Phase.FRAMES and name in used and 0 <= done_s <= total_s


def test_a_warm_run_says_each_cached_phase_once(runs):
    _, warm, _ = runs
    assert warm.reports[:2] == [
        ("cached", Phase.BENCHMARK, VIDEOS_GENERATED),
        ("cached", Phase.FRAMES, VIDEOS_USED),
    ]
    assert warm.reports[2:] == counted(Phase.SESSIONS, SESSIONS)


def test_frame_extraction_reports_the_seconds_sampled(runs, tmp_path, monkeypatch):
    """Every sample written is reported when the interval is 0 (it is a few per second):
    the seconds of video sampled so far, of the video's duration."""
    _, _, cache = runs
    video = synthetic_dir(cache, 0) / "videos" / "v2_no_triangle.mp4"  # 25 s long
    monkeypatch.setattr(frames_module, "PROGRESS_INTERVAL_S", 0.0)
    heard: list[tuple[float, float]] = []
    frames = FrameCache(tmp_path / "frames").get(
        video, ImageRules(fps=1.0), lambda done, total: heard.append((done, total))
    )
    assert heard == [(float(k), 25.0) for k in range(25)]
    assert len(frames.frames) == 25

    again: list[tuple[float, float]] = []
    FrameCache(tmp_path / "frames").get(
        video, ImageRules(fps=1.0), lambda done, total: again.append((done, total))
    )
    assert again == []  # a cached entry decodes nothing


# --------------------------------------------------------------------------- the display


def terminal() -> tuple[Console, io.StringIO]:
    written = io.StringIO()
    return Console(file=written, force_terminal=True, width=100, color_system=None), written


def test_the_terminal_display_leaves_one_line_per_phase():
    console, written = terminal()
    with TerminalProgress(console) as shown:
        shown.cached(Phase.BENCHMARK, 7)
        shown.start(Phase.SESSIONS, 3)
        shown.advance(Phase.SESSIONS, 1)
        shown.warn("session qa:001 failed (frames, input): [bold] is no markup")
        shown.advance(Phase.SESSIONS, 3, failed=1)
        shown.finish(Phase.SESSIONS)
    lines = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", written.getvalue()).replace("\r", "\n")
    assert "generating synthetic benchmark: 7 videos already cached\n" in lines
    assert "session qa:001 failed (frames, input): [bold] is no markup\n" in lines
    assert re.search(r"streaming sessions: 3/3 sessions, 1 failed in \d+\.\ds\n", lines)
    assert "0/3 sessions" in lines  # drawn at the start, before any session ended


def test_without_a_terminal_only_warnings_are_printed():
    written = io.StringIO()
    console = Console(file=written, width=100)
    shown = progress_display(console, show=True)
    assert type(shown) is WarningsOnly
    with shown:
        shown.start(Phase.FRAMES, 2)
        shown.item(Phase.FRAMES, "videos/a.mp4", 10.0, 60.0)
        shown.advance(Phase.FRAMES, 2)
        shown.finish(Phase.FRAMES)
        shown.cached(Phase.BENCHMARK, 7)
        shown.warn("session qa:001 failed")
    assert written.getvalue() == "session qa:001 failed\n"
    assert type(progress_display(terminal()[0], show=False)) is WarningsOnly  # --json


# --------------------------------------------------------------------------- end to end


def on_a_terminal(*args: str) -> tuple[str, str, int]:
    """`streameval ARGS` with stderr on a pseudo-terminal (100 columns) and stdout on a
    pipe: (stderr as a terminal shows it, without escape sequences; stdout; exit status)."""
    leader, follower = sized_terminal(100, 30)
    child = subprocess.Popen(
        [sys.executable, "-m", "streameval.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**os.environ, "TERM": "xterm-256color"},
    )
    os.close(follower)
    shown: list[bytes] = []
    reader = threading.Thread(target=lambda: shown.append(read_terminal(leader, 300)))
    reader.start()
    try:
        stdout, _ = child.communicate(timeout=300)
    finally:
        child.kill()
        reader.join(timeout=10)
        os.close(leader)
    return plain(b"".join(shown)), stdout.decode(), child.returncode


def test_demo_shows_each_phase_on_a_terminal_and_keeps_stdout_for_results(tmp_path):
    cache = tmp_path / "cache"
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    stderr, stdout, status = on_a_terminal("demo", "--cache-dir", str(cache), "--store", store)
    assert status == 0, stderr
    where = [stderr.find(name) for name in PHASE_NAMES]
    assert -1 not in where and where == sorted(where), where
    assert "0/20 sessions" in stderr  # the total, before the first session ended
    assert "20 sessions finished, 0 failed" in " ".join(stdout.split())
    assert not [name for name in PHASE_NAMES if name in stdout]

    # Warm, with --json: nothing on the terminal but the JSON on stdout.
    args = ("demo", "--json", "--cache-dir", str(cache), "--store", store)
    stderr, stdout, status = on_a_terminal(*args)
    assert status == 0, stderr
    assert not [name for name in PHASE_NAMES if name in stderr], stderr
    assert set(json.loads(stdout)) == {"run_id", "store", "metrics"}

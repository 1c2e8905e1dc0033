"""Progress of a run's phases (streameval/progress.py): the synthetic benchmark generated,
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

from streameval.core.benchmark.loader import synthetic_dir
from streameval.core.cli.progress_display import (
    PLAIN_PERIOD_S,
    PlainProgress,
    TerminalProgress,
    WarningsOnly,
    progress_display,
)
from streameval.core.cli.run_command import execute
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.frames import jpeg_writer
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.types import ImageRules
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.progress import Phase
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
    # The benchmark first; then the sessions stream while the frames are prepared (decoding
    # ahead), each phase counted to its total; no warning.
    reports = [r for r in cold.reports if r[0] != "item"]
    generated = counted(Phase.BENCHMARK, VIDEOS_GENERATED)
    assert reports[: len(generated)] == generated
    assert cold.of(Phase.FRAMES) == counted(Phase.FRAMES, VIDEOS_USED)
    assert cold.of(Phase.SESSIONS) == counted(Phase.SESSIONS, SESSIONS)
    assert len(reports) == len(generated) + (VIDEOS_USED + 2) + (SESSIONS + 2)
    assert reports.index(("start", Phase.SESSIONS, SESSIONS)) < reports.index(
        ("finish", Phase.FRAMES)
    )
    # Only videos being decoded report on their own (how often depends on the machine).
    used = {"videos/v0_colours.mp4", "videos/v1_digits.mp4", "videos/v2_no_triangle.mp4"}
    for _, phase, name, done_s, total_s in [r for r in cold.reports if r[0] == "item"]:
        assert phase == Phase.FRAMES and name in used and 0 <= done_s <= total_s


def test_a_warm_run_says_each_cached_phase_once(runs):
    _, warm, _ = runs
    assert warm.reports[0] == ("cached", Phase.BENCHMARK, VIDEOS_GENERATED)
    assert warm.of(Phase.FRAMES) == [("cached", Phase.FRAMES, VIDEOS_USED)]
    assert warm.of(Phase.SESSIONS) == counted(Phase.SESSIONS, SESSIONS)
    assert len(warm.reports) == 2 + SESSIONS + 2


def test_frame_extraction_reports_the_seconds_sampled(runs, tmp_path, monkeypatch):
    """Every sample written is reported when the interval is 0 (it is a few per second):
    the seconds of video sampled so far, of the video's duration."""
    _, _, cache = runs
    video = synthetic_dir(cache, 0) / "videos" / "v2_no_triangle.mp4"  # 25 s long
    monkeypatch.setattr(jpeg_writer, "PROGRESS_INTERVAL_S", 0.0)
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


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plain_display(period_s: float = PLAIN_PERIOD_S) -> tuple[PlainProgress, io.StringIO, FakeClock]:
    written = io.StringIO()
    clock = FakeClock()
    shown = PlainProgress(Console(file=written, width=40), period_s=period_s, clock=clock)
    return shown, written, clock


def test_without_a_terminal_a_line_per_phase_and_every_warning():
    shown, written, clock = plain_display()
    with shown:
        shown.cached(Phase.BENCHMARK, 7)
        shown.start(Phase.FRAMES, 2)
        shown.item(Phase.FRAMES, "videos/a.mp4", 10.0, 60.0)  # within the period: no line
        shown.advance(Phase.FRAMES, 2)
        clock.now += 2.5
        shown.finish(Phase.FRAMES)
        shown.start(Phase.SESSIONS, 3)
        shown.warn("session qa:001 failed (frames, input): [bold] is no markup, nor wrapped")
        shown.advance(Phase.SESSIONS, 3, failed=1)
        clock.now += 0.25
        shown.finish(Phase.SESSIONS)
        shown.start(Phase.SCORING, None)
        shown.finish(Phase.SCORING)
    assert written.getvalue().splitlines() == [
        "generating synthetic benchmark: 7 videos already cached",
        "preparing frames: started, 2 videos",
        "preparing frames: 2/2 videos in 2.5s",
        "streaming sessions: started, 3 sessions",
        "session qa:001 failed (frames, input): [bold] is no markup, nor wrapped",
        "streaming sessions: 3/3 sessions, 1 failed in 0.2s",
        "scoring: started",
        "scoring: done in 0.0s",
    ]


def test_a_running_phase_prints_at_most_one_line_per_period():
    shown, written, clock = plain_display(period_s=30.0)
    shown.start(Phase.SESSIONS, 40)
    for done in range(1, 41):  # a session ends every 4 s: 160 s in all
        clock.now += 4.0
        shown.advance(Phase.SESSIONS, done, failed=done // 10)
    shown.finish(Phase.SESSIONS)
    # 30 s after the start line, then 30 s after each line: sessions 8, 16, 24, 32, 40.
    assert written.getvalue().splitlines() == [
        "streaming sessions: started, 40 sessions",
        "streaming sessions: 8/40 sessions",
        "streaming sessions: 16/40 sessions, 1 failed",
        "streaming sessions: 24/40 sessions, 2 failed",
        "streaming sessions: 32/40 sessions, 3 failed",
        "streaming sessions: 40/40 sessions, 4 failed",
        "streaming sessions: 40/40 sessions, 4 failed in 160.0s",
    ]


def test_a_long_video_being_decoded_prints_how_far_it_is_once_per_period():
    shown, written, clock = plain_display(period_s=30.0)
    shown.start(Phase.FRAMES, 1)
    for second in range(0, 3600, 120):  # 10 s of wall time per 120 s of video
        clock.now += 10.0
        shown.item(Phase.FRAMES, "videos/long.mp4", float(second), 3600.0)
    shown.item(Phase.FRAMES, "videos/long.mp4", 3600.0, 3600.0)  # done: no line
    lines = written.getvalue().splitlines()
    assert lines == [
        "preparing frames: started, 1 videos",
        *(f"preparing frames: videos/long.mp4 {s}/3600 s decoded" for s in range(240, 3600, 360)),
    ]


def test_which_display_each_stderr_gets():
    assert type(progress_display(Console(file=io.StringIO()), show=True)) is PlainProgress
    assert type(progress_display(Console(file=io.StringIO()), show=False)) is PlainProgress
    assert type(progress_display(terminal()[0], show=True)) is TerminalProgress
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
    # The sessions start streaming as the frames begin to be prepared (decoding ahead).
    shown = [Phase.BENCHMARK, Phase.SESSIONS, Phase.FRAMES, Phase.SCORING]
    where = [stderr.find(phase.value) for phase in shown]
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


def test_demo_without_a_terminal_prints_plain_phase_lines(tmp_path):
    """stderr to a file, as in CI or a Slurm log: a line as each phase starts and ends,
    nothing a terminal would draw; `--json` keeps stdout to the one JSON object."""
    errors = tmp_path / "stderr.log"
    args = ("demo", "--json", "--cache-dir", str(tmp_path / "cache"))
    with errors.open("wb") as stderr:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "streameval.cli",
                *args,
                "--store",
                f"sqlite:///{tmp_path / 'd.db'}",
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            timeout=300,
        )
    log = errors.read_bytes().decode()
    assert done.returncode == 0, log
    assert b"\x1b" not in errors.read_bytes() and "\r" not in log
    lines = log.splitlines()
    expected = [
        "generating synthetic benchmark: started, 7 videos",
        r"generating synthetic benchmark: 7/7 videos in \d+\.\ds",
        # The sessions stream while the frames are prepared, and end after them.
        "streaming sessions: started, 20 sessions",
        "preparing frames: started, 7 videos",
        r"preparing frames: 7/7 videos in \d+\.\ds",
        r"streaming sessions: 20/20 sessions in \d+\.\ds",
        "scoring: started",
        r"scoring: done in \d+\.\ds",
    ]
    where = [next(k for k, line in enumerate(lines) if re.fullmatch(e, line)) for e in expected]
    assert where == sorted(where), log
    body = json.loads(done.stdout)
    assert set(body) == {"run_id", "store", "metrics"}

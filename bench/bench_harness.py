"""Speed of the harness itself: TTFT overhead, logical-pacing throughput, Core memory.

    python bench/bench_harness.py ttft          # instant adapter: Core-measured TTFT
    python bench/bench_harness.py throughput    # no-op adapter: frames/s incl. the store,
                                                # against a raw `websockets` loopback pair
    python bench/bench_harness.py memory        # 50 sessions on a 1-hour video: Core peak RSS
    python bench/bench_harness.py wallclock     # 2,000 wall-clock sessions at 1 fps: lag, drops
    python bench/bench_harness.py all --write   # all of them, results into BENCHMARKS.md

Each measurement runs the Core as its own process (`python -m streameval.cli run`) against
an adapter process over loopback WebSockets, with a SQLite store, like a user would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.make_video import cached_video  # noqa: E402
from bench.report import update_section  # noqa: E402
from streameval.core.benchmark.records import Benchmark, QARecord  # noqa: E402
from streameval.core.frames.cache import FrameCache  # noqa: E402
from streameval.core.frames.types import ImageRules  # noqa: E402
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.session.frame_messages import build_message  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import Event, EventKind  # noqa: E402
from streameval.protocol import MAX_MESSAGE_BYTES, FrameAck  # noqa: E402

OUT = REPO / "bench" / "out"


def qa_benchmark(video: Path, question_times: list[float], name: str) -> Path:
    """A QA benchmark over one video: a question at each time, written next to the video."""
    records = [
        QARecord(
            record_id=f"{name}:{i:05d}",
            source_id=f"{name}:{i:05d}",
            source_benchmark="bench",
            task_type="bench",
            video_path=video.name,
            question="Which option?",
            options=("A. yes", "B. no"),
            answer="A",
            question_time_s=t,
            evidence_anchor_s=t,
        )
        for i, t in enumerate(question_times)
    ]
    path = video.parent / f"{name}.json"
    benchmark = Benchmark(name=name, version="1", video_root=str(video.parent), records=records)
    path.write_text(benchmark.model_dump_json())
    return path


def run_core(
    benchmark: Path, adapter_url: str, store_url: str, *extra: str, watch_memory: bool = True
) -> tuple[dict, float | None]:
    """Run the Core as a child process; returns its JSON summary and its peak RSS in MiB
    (its CPU seconds are added to the summary as `core_cpu_s`), both with its children's.

    Without `watch_memory` the peak is None: polling the process tree costs about 2 ms of
    CPU every 20 ms, which a speed measurement must not take from the Core."""
    command = [
        sys.executable,
        "-m",
        "streameval.cli",
        "run",
        "--benchmark",
        str(benchmark),
        "--adapter-url",
        adapter_url,
        "--store",
        store_url,
        "--cache-dir",
        str(OUT / "cache"),
        "--json",
        *extra,
    ]
    before = os.times()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watched = psutil.Process(child.pid)
    peak = 0
    while watch_memory and child.poll() is None:
        with contextlib.suppress(psutil.Error):
            # With its children: from 64 sessions at once it stores through one of its own.
            family = [watched, *watched.children(recursive=True)]
            peak = max(peak, sum(process.memory_info().rss for process in family))
        time.sleep(0.02)
    stdout, stderr = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"core failed: {stderr.strip().splitlines()[-1:]}")
    after = os.times()
    summary = json.loads(stdout)
    summary["core_cpu_s"] = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return summary, peak / 2**20 if watch_memory else None


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def fresh_store(name: str) -> str:
    path = OUT / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


def measured_run(
    adapter_name: str,
    benchmark: Path,
    name: str,
    *options: str,
    warm: bool = True,
    watch_memory: bool = True,
) -> tuple[dict, float, float | None, str]:
    """Serve the adapter, warm the frame cache with one record (so that decoding is not
    measured), then time one Core process. Returns its summary, seconds, peak RSS (MiB, or
    None without `watch_memory`: see run_core) and the store URL holding its events."""
    store_url = fresh_store(name)
    with AdapterProcess(adapter_name) as adapter:
        if warm:
            run_core(benchmark, adapter.url, fresh_store(f"{name}-warm"), "--limit", "1")
        started = time.perf_counter()
        summary, peak_mib = run_core(
            benchmark, adapter.url, store_url, *options, watch_memory=watch_memory
        )
        elapsed = time.perf_counter() - started
    return summary, elapsed, peak_mib, store_url


def bench_ttft() -> str:
    video = cached_video(OUT, seconds=30, width=320, height=180, fps=10)
    benchmark = qa_benchmark(video, [5.0 + (i % 20) for i in range(1000)], "ttft")
    summary, _, _, store_url = measured_run(
        "always",
        benchmark,
        "ttft",
        "--concurrency",
        "1",
        "--qa-history",
        "1",
        watch_memory=False,
    )
    ttft_ms, latency_ms = [], []
    with Store(store_url) as store:
        asked: dict[str, int] = {}
        for event in store.iter_events(summary["run_id"]):
            if event.kind == EventKind.QUESTION_SENT:
                asked[event.session_id] = event.runtime_ns
            elif event.kind == EventKind.RESPONSE_START:
                ttft_ms.append((event.runtime_ns - asked[event.session_id]) / 1e6)
            elif event.kind == EventKind.RESPONSE_FINAL:
                latency_ms.append((event.runtime_ns - asked[event.session_id]) / 1e6)
    return (
        f"Instant adapter (`always`), {len(ttft_ms)} questions, one session at a time, "
        f"logical pacing, TTFT as the Core measures it (question sent -> first token "
        f"received):\n\n"
        f"| | p50 | p95 | p99 | max | target |\n|---|---|---|---|---|---|\n"
        f"| TTFT (ms) | {percentile(ttft_ms, 50):.3f} | {percentile(ttft_ms, 95):.3f} | "
        f"{percentile(ttft_ms, 99):.3f} | {max(ttft_ms):.3f} | p50 < 2, p99 < 10 |\n"
        f"| response latency (ms) | {percentile(latency_ms, 50):.3f} | "
        f"{percentile(latency_ms, 95):.3f} | {percentile(latency_ms, 99):.3f} | "
        f"{max(latency_ms):.3f} | |\n"
    )


# 38,400 frames: at 10,000-25,000 frames/s a run streams for seconds, not a fraction of one.
THROUGHPUT_SESSIONS = 64
THROUGHPUT_FRAMES = 600  # the full prefix of a 10-minute video at 1 fps
THROUGHPUT_IN_FLIGHT = 8
WS_OPTIONS = {"compression": None, "max_size": MAX_MESSAGE_BYTES}  # as the Core and the SDK


def throughput_video() -> Path:
    return cached_video(OUT, seconds=600, width=320, height=180, fps=10)


def load_average() -> str:
    return "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())


def core_throughput(benchmark: Path, warm: bool) -> dict:
    """One Core process against the `silent` adapter: frames, events and times."""
    summary, elapsed, _, store_url = measured_run(
        "silent",
        benchmark,
        "throughput",
        "--concurrency",
        str(THROUGHPUT_IN_FLIGHT),
        "--qa-history",
        "0",
        warm=warm,
        watch_memory=False,
    )
    with Store(store_url) as store:
        sent = [e for e in store.iter_events(summary["run_id"]) if e.kind == EventKind.FRAME_SENT]
        events = store.count_events(summary["run_id"])
    stamps = [e.runtime_ns for e in sent]
    return {
        "frames": len(sent),
        "events": events,
        "whole_s": elapsed,
        "streaming_s": (max(stamps) - min(stamps)) / 1e9,
        "cpu_s": summary["core_cpu_s"],
        "mean_bytes": sum(e.payload.bytes for e in sent) / len(sent),
    }


def raw_throughput(video: Path, record: bool = False) -> dict:
    """The same exchange over a plain `websockets` server and client, each its own process:
    the same messages (header and JPEG of each frame), each waiting for a small text ack.
    With `record`, the client also makes the Core's two events per frame (`frame_sent`,
    `frame_ack`, payloads validated) and stores them in a SQLite store, 500 at a time on its
    loop: what recording alone costs, with none of the Core's session logic."""
    helper = [sys.executable, str(Path(__file__).resolve())]
    server = subprocess.Popen([*helper, "_raw-server"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        started = time.perf_counter()
        client = subprocess.run(
            [*helper, "_raw-client", port, str(video), *(["record"] if record else [])],
            capture_output=True,
            text=True,
            check=True,
        )
        elapsed = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait()
    result = json.loads(client.stdout)
    result["whole_s"] = elapsed
    return result


async def _raw_server() -> None:
    from websockets.asyncio.server import ServerConnection, serve

    async def acknowledge(ws: ServerConnection) -> None:
        index = 0
        async for _ in ws:
            await ws.send(f'{{"type":"frame_ack","index":{index}}}')
            index += 1

    async with serve(acknowledge, "127.0.0.1", 0, **WS_OPTIONS) as server:
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Future()


class _Recording:
    """The raw client's events, stored 500 at a time (raw_throughput's `record`)."""

    def __init__(self, sessions: int) -> None:
        self.store = Store(fresh_store("throughput-raw"))
        self.store.create_run("raw", "throughput", {})
        self.store.add_sessions("raw", [(f"s{k}", [f"s{k}"]) for k in range(sessions)])
        self.pending: list[Event] = []

    def record(self, session: str, seq: int, kind: EventKind, **payload: object) -> None:
        self.pending.append(Event("raw", session, seq, kind, time.monotonic_ns(), None, payload))
        if len(self.pending) >= 500:
            self.flush()

    def flush(self) -> None:
        self.store.append_events(self.pending)
        self.pending = []


async def _raw_client(port: int, video: Path, record: bool) -> None:
    from websockets.asyncio.client import connect

    frames = FrameCache(OUT / "cache" / "frames").get(video, ImageRules(fps=1.0))
    refs = frames.frames[:THROUGHPUT_FRAMES]
    messages = [build_message(ref, frames.read(ref)).data for ref in refs]
    assert len(FrameAck(index=0).model_dump_json()) == len('{"type":"frame_ack","index":0}')
    room = asyncio.Semaphore(THROUGHPUT_IN_FLIGHT)
    stamps: list[int] = []
    events = _Recording(THROUGHPUT_SESSIONS) if record else None

    async def session(name: str) -> None:
        async with room, connect(f"ws://127.0.0.1:{port}/", **WS_OPTIONS) as ws:
            for ref, message in zip(refs, messages, strict=True):
                await ws.send(message)
                stamps.append(time.monotonic_ns())
                if events is not None:
                    sent = {
                        "frame_id": ref.frame_id,
                        "t": ref.t,
                        "source_t": None,
                        "scheduled_ns": None,
                    }
                    sent |= {"lag_ns": None, "width": ref.width, "height": ref.height}
                    seq = 2 * ref.index
                    events.record(
                        name, seq, EventKind.FRAME_SENT, index=ref.index, bytes=len(message), **sent
                    )
                ack = await ws.recv()
                if events is not None:
                    events.record(
                        name, seq + 1, EventKind.FRAME_ACK, index=json.loads(ack)["index"]
                    )

    await asyncio.gather(*(session(f"s{k}") for k in range(THROUGHPUT_SESSIONS)))
    if events is not None:
        events.flush()
    used = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "frames": len(stamps),
        "streaming_s": (max(stamps) - min(stamps)) / 1e9,
        "cpu_s": used.ru_utime + used.ru_stime,
        "mean_bytes": sum(len(m) for m in messages) / len(messages),
    }
    print(json.dumps(result))


def bench_throughput(repeat: int = 5) -> str:
    """Rounds of a Core run, a raw pair run and a raw pair + events run, one after the other.

    This machine's speed moves between runs (the same run streams up to 1.5x faster or
    slower a minute later), so each round's Core rate is divided by the raw pair's rate of
    the same round, and the median of those ratios is the figure."""
    video = throughput_video()
    name = "throughput"
    benchmark = qa_benchmark(video, [599.0] * THROUGHPUT_SESSIONS, name)
    load_before = load_average()
    rounds = []
    for attempt in range(repeat):
        # Which side runs first alternates: a machine that speeds up or slows down over a
        # round favours neither.
        core_first = attempt % 2 == 0
        core = core_throughput(benchmark, warm=attempt == 0) if core_first else None
        raw, recorded = raw_throughput(video), raw_throughput(video, record=True)
        core = core or core_throughput(benchmark, warm=False)
        rounds.append((raw, recorded, core))
    load_after = load_average()

    def rate(r: dict) -> float:
        return r["frames"] / r["streaming_s"]

    def ratio(round_: tuple[dict, dict, dict]) -> float:
        return rate(round_[2]) / rate(round_[0])

    ordered = sorted(rounds, key=ratio)
    median_round = ordered[len(rounds) // 2]
    raw, recorded, core = median_round
    median = ratio(median_round)
    spread = f"{ratio(ordered[0]):.2f}-{ratio(ordered[-1]):.2f}"

    def rates(which: int) -> str:
        return ", ".join(f"{rate(r[which]):,.0f}" for r in rounds)

    def row(what: str, r: dict, events: str) -> str:
        return (
            f"| {what} | {r['frames']} | {events} | {r['mean_bytes'] / 1024:.1f} | "
            f"{r['whole_s']:.2f} | {r['frames'] / r['whole_s']:,.0f} | {r['streaming_s']:.2f} | "
            f"{r['frames'] / r['streaming_s']:,.0f} | {r['cpu_s']:.2f} |\n"
        )

    verdict = "meets it" if median >= 0.6 else "MISSES it"
    return (
        f"Logical pacing (every frame waits for its ack), {THROUGHPUT_SESSIONS} sessions x "
        f"{THROUGHPUT_FRAMES} frames (full prefix of a 10-minute 320x180 video at 1 fps), "
        f"{THROUGHPUT_IN_FLIGHT} in flight. 'Core' is `streameval run` against the no-op "
        f"adapter (`silent`), every event committed to a SQLite store; 'raw pair' is a plain "
        f"`websockets` server and client, each its own process, sending the same messages "
        f"(header and JPEG of each frame) over the same number of connections, each message "
        f"waiting for a small text ack. 'Whole process' is the Core (or raw client) process "
        f"from start to exit (imports, checks, store commits included); 'streaming' is first "
        f"to last frame sent. CPU: of the Core process, or of the raw client. 'Raw pair + "
        f"events' is the raw pair whose client also makes the Core's two events per frame "
        f"(`frame_sent`, `frame_ack`, payloads validated) and stores them in SQLite, 500 at a "
        f"time on its loop: what recording costs without any of the Core's session logic. "
        f"{repeat} rounds, each a Core run, a raw pair run and a raw pair + events run, the "
        f"Core first in odd rounds and last in even ones; the table shows the round with the "
        f"median ratio.\n\n"
        f"| | frames | events stored | KiB/message | whole process (s) | frames/s | "
        f"streaming (s) | frames/s | CPU (s) |\n|---|---|---|---|---|---|---|---|---|\n"
        + row("raw pair", raw, "-")
        + row("raw pair + events", recorded, str(2 * recorded["frames"]))
        + row("Core", core, str(core["events"]))
        + f"\nCore streaming rate / raw pair's, median of the {repeat} rounds' ratios: "
        f"**{median:.2f}x** (target: at least 0.6x): {verdict}; spread {spread}. Each "
        f"round's ratio: "
        f"{', '.join(f'{ratio(r):.2f}' for r in rounds)}. Streaming frames/s, round by round: "
        f"raw pair {rates(0)}; raw pair + events {rates(1)}; Core {rates(2)}. 1/5/15-minute "
        f"load average: {load_before} before, {load_after} after.\n"
    )


def bench_memory() -> str:
    video = cached_video(OUT, seconds=3600, width=320, height=180, fps=5)
    benchmark = qa_benchmark(video, [3599.0] * 50, "memory")
    # Not warmed: decoding the hour-long video once is part of what the Core holds in memory.
    summary, elapsed, peak_mib, _ = measured_run(
        "silent", benchmark, "memory", "--concurrency", "50", "--qa-history", "0", warm=False
    )
    return (
        f"50 sessions stream the full prefix of a 1-hour video (3,600 frames each at 1 fps, "
        f"180,000 frames in all) concurrently to a no-op adapter; the Core decodes the video "
        f"once into the on-disk frame cache and reads each frame from disk when it sends it:"
        f"\n\n| sessions | finished | seconds | Core peak RSS (MiB) | target |\n"
        f"|---|---|---|---|---|\n"
        f"| 50 | {summary['finished']} | {elapsed:.1f} | {peak_mib:.0f} | < 1,024 |\n"
    )


WALL_SESSIONS = 2000
WALL_SECONDS = 60  # of video each session streams, at 1 fps and speed 1: a minute


def raise_open_files(needed: int) -> int:
    """Both the Core and the adapter (children inherit it) hold one socket per session."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise SystemExit(f"needs {needed} open files; the hard limit is {hard} (ulimit -Hn)")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def peak_concurrency(store: Store, run_id: str) -> int:
    """The most sessions streaming at once (session_start to session_end)."""
    edges = []
    for event in store.iter_events(run_id):
        if event.kind == EventKind.SESSION_START:
            edges.append((event.runtime_ns, 1))
        elif event.kind in (EventKind.SESSION_END, EventKind.SESSION_FAILED):
            edges.append((event.runtime_ns, -1))
    running = peak = 0
    for _, step in sorted(edges):
        running += step
        peak = max(peak, running)
    return peak


# Frame lag is reported for the run's first STORM_S seconds (from its first session's
# start: every session connects and starts then) and for the rest (the steady state).
STORM_S = 20.0


@contextlib.contextmanager
def busy_load(processes: int) -> Iterator[None]:
    """`processes` CPU-bound processes for the duration: a machine loaded by other work."""
    spin = [sys.executable, "-c", "while True: pass"]
    children = [subprocess.Popen(spin) for _ in range(processes)]
    try:
        yield
    finally:
        for child in children:
            child.kill()
            child.wait()


def wallclock_lags(store: Store, run_id: str) -> tuple[list[float], list[float], int]:
    """Frame lags (ms) in the run's first STORM_S seconds and after, and the frames dropped."""
    starts, sent, dropped = [], [], 0
    for event in store.iter_events(run_id):
        if event.kind == EventKind.SESSION_START:
            starts.append(event.runtime_ns)
        elif event.kind == EventKind.FRAME_SENT:
            sent.append((event.runtime_ns, event.payload.lag_ns / 1e6))
        elif event.kind == EventKind.FRAME_DROPPED:
            dropped += 1
    storm_end = min(starts) + STORM_S * 1e9
    first = [lag for at, lag in sent if at < storm_end]
    return first, [lag for at, lag in sent if at >= storm_end], dropped


def bench_wallclock(
    sessions: int = WALL_SESSIONS,
    seconds: int = WALL_SECONDS,
    start_rate: float | None = None,
    load: int = 0,
) -> str:
    limit = raise_open_files(sessions * 2 + 1024)
    video = throughput_video()
    # Each session streams the `seconds` before its own question, spread over the video: the
    # sessions read different frames, as a benchmark's records do.
    span = 599 - seconds
    times = [float(seconds + (i * 7) % span) for i in range(sessions)]
    benchmark = qa_benchmark(video, times, "wallclock")
    rate = [] if start_rate is None else ["--start-rate", str(start_rate)]
    load_before = load_average()
    with busy_load(load):
        summary, elapsed, peak_mib, store_url = measured_run(
            "silent", benchmark, "wallclock", "--pacing", "wall_clock",
            "--concurrency", str(sessions), "--qa-history", str(seconds),
            "--response-timeout", "120", *rate,
        )  # fmt: skip
    load_after = load_average()
    with Store(store_url) as store:
        first, steady, dropped = wallclock_lags(store, summary["run_id"])
        peak = peak_concurrency(store, summary["run_id"])
    lags_ms = first + steady
    p99 = percentile(lags_ms, 99)
    verdict = "meets it" if dropped == 0 and p99 < 50 else "MISSES it"
    starts = (
        "all at once"
        if start_rate and start_rate >= 1e6
        else (
            f"{start_rate:g} sessions started per second"
            if start_rate
            else "`--start-rate` default"
        )
    )
    return (
        f"{sessions:,} sessions against one adapter endpoint (`--concurrency "
        f"{sessions}`), started {starts}; wall-clock pacing at speed 1, 1 fps: each streams "
        f"the {seconds} s "
        f"before its question ({seconds + 1} frames of a 320x180 video, 14 KiB each, at "
        f"different places in the video) to the no-op adapter (`silent`), and every event "
        f"goes to a SQLite store (through the Core's store-writer process, which it starts "
        f"from 64 sessions at once; its CPU and memory are counted with the Core's). Lag: how "
        f"late each frame left against its schedule "
        f"(`frame_sent.lag_ns`); a frame is dropped when the next one is already due. Core "
        f"and adapter share the machine; open-file limit {limit:,}; {load} busy processes "
        f"beside them.\n\n"
        f"| sessions | finished | peak at once | frames sent | dropped | lag p50 (ms) | p95 | "
        f"p99 | max | p99 first {STORM_S:.0f} s | p99 after | Core CPU (s) | "
        f"Core peak RSS (MiB) | wall (s) |\n"
        f"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        f"| {sessions:,} | {summary['finished']:,} | {peak:,} | {len(lags_ms):,} | {dropped} | "
        f"{percentile(lags_ms, 50):.2f} | {percentile(lags_ms, 95):.2f} | {p99:.2f} | "
        f"{max(lags_ms):.2f} | {percentile(first, 99):.2f} | "
        f"{percentile(steady, 99) if steady else float('nan'):.2f} | "
        f"{summary['core_cpu_s']:.1f} | {peak_mib:.0f} | {elapsed:.1f} |\n\n"
        f"Target: 0 drops and lag p99 under 50 ms: {verdict}. 1/5/15-minute load average: "
        f"{load_before} before, {load_after} after.\n"
    )


BENCHES = {
    "ttft": bench_ttft,
    "throughput": bench_throughput,
    "memory": bench_memory,
    "wallclock": bench_wallclock,
}
TITLES = {
    "ttft": "Harness overhead on TTFT",
    "throughput": "Logical-pacing throughput",
    "memory": "Core memory with 50 concurrent sessions",
    "wallclock": "2,000 wall-clock sessions",
}
# The raw `websockets` pair of the throughput bench, each run as its own process.
HELPERS = {
    "_raw-server": lambda: asyncio.run(_raw_server()),
    "_raw-client": lambda: asyncio.run(
        _raw_client(int(sys.argv[2]), Path(sys.argv[3]), "record" in sys.argv[4:])
    ),
}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in HELPERS:
        HELPERS[sys.argv[1]]()
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", choices=[*BENCHES, "all"])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--repeat", type=int, default=5, help="throughput: rounds")
    parser.add_argument("--sessions", type=int, default=WALL_SESSIONS, help="wallclock")
    parser.add_argument("--seconds", type=int, default=WALL_SECONDS, help="wallclock")
    parser.add_argument(
        "--start-rate", type=float, help="wallclock: sessions started per second (1e9: at once)"
    )
    parser.add_argument("--load", type=int, default=0, help="wallclock: busy processes beside")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    options = {
        "throughput": {"repeat": args.repeat},
        "wallclock": {
            "sessions": args.sessions,
            "seconds": args.seconds,
            "start_rate": args.start_rate,
            "load": args.load,
        },
    }
    for name in BENCHES if args.which == "all" else [args.which]:
        body = BENCHES[name](**options.get(name, {}))
        stamp = (
            f"Measured {date.today().isoformat()} on {platform.machine()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}; rerun: "
            f"`python bench/bench_harness.py {name} --write`.\n\n"
        )
        print(f"## {TITLES[name]}\n\n{stamp}{body}")
        if args.write:
            update_section(TITLES[name], stamp + body)


if __name__ == "__main__":
    main()

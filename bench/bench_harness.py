"""Speed of the harness itself: TTFT overhead, logical-pacing throughput, Core memory.

    python bench/bench_harness.py ttft          # instant adapter: Core-measured TTFT
    python bench/bench_harness.py throughput    # no-op adapter: frames/s incl. the store
    python bench/bench_harness.py memory        # 50 sessions on a 1-hour video: Core peak RSS
    python bench/bench_harness.py all --write   # all three, results into BENCHMARKS.md

Each measurement runs the Core as its own process (`python -m streameval.cli run`) against
an adapter process over loopback WebSockets, with a SQLite store, like a user would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.make_video import cached_video  # noqa: E402
from bench.report import update_section  # noqa: E402
from streameval.core.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.benchmark.records import Benchmark, QARecord  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402

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


def run_core(benchmark: Path, adapter_url: str, store_url: str, *extra: str) -> tuple[dict, float]:
    """Run the Core as a child process; returns its JSON summary and its peak RSS in MiB."""
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
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watched = psutil.Process(child.pid)
    peak = 0
    while child.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, watched.memory_info().rss)
        time.sleep(0.02)
    stdout, stderr = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"core failed: {stderr.strip().splitlines()[-1:]}")
    return json.loads(stdout), peak / 2**20


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def fresh_store(name: str) -> str:
    path = OUT / f"{name}.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return f"sqlite:///{path}"


def measured_run(
    adapter_name: str, benchmark: Path, name: str, *options: str, warm: bool = True
) -> tuple[dict, float, float, str]:
    """Serve the adapter, warm the frame cache with one record (so that decoding is not
    measured), then time one Core process. Returns its summary, seconds, peak RSS (MiB) and
    the store URL holding its events."""
    store_url = fresh_store(name)
    with AdapterProcess(adapter_name) as adapter:
        if warm:
            run_core(benchmark, adapter.url, fresh_store(f"{name}-warm"), "--limit", "1")
        started = time.perf_counter()
        summary, peak_mib = run_core(benchmark, adapter.url, store_url, *options)
        elapsed = time.perf_counter() - started
    return summary, elapsed, peak_mib, store_url


def bench_ttft() -> str:
    video = cached_video(OUT, seconds=30, width=320, height=180, fps=10)
    benchmark = qa_benchmark(video, [5.0 + (i % 20) for i in range(1000)], "ttft")
    summary, _, _, store_url = measured_run(
        "always", benchmark, "ttft", "--concurrency", "1", "--qa-history", "1"
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


def bench_throughput() -> str:
    video = cached_video(OUT, seconds=600, width=320, height=180, fps=10)
    benchmark = qa_benchmark(video, [599.0] * 16, "throughput")
    summary, elapsed, _, store_url = measured_run(
        "silent", benchmark, "throughput", "--concurrency", "8", "--qa-history", "0"
    )
    with Store(store_url) as store:
        sent = [
            e.runtime_ns
            for e in store.iter_events(summary["run_id"])
            if e.kind == EventKind.FRAME_SENT
        ]
        events = store.count_events(summary["run_id"])
    streaming = (max(sent) - min(sent)) / 1e9
    frames = len(sent)
    return (
        f"No-op adapter (`silent`), logical pacing (every frame waits for its ack), 16 "
        f"sessions x 600 frames (full prefix of a 10-minute video at 1 fps), 8 in flight, "
        f"every event committed to a SQLite store. 'Whole process' is the Core process from "
        f"start to exit (imports, checks, store commits included); 'streaming' is first to "
        f"last frame sent:\n\n"
        f"| frames | events stored | whole process (s) | frames/s | streaming (s) | frames/s "
        f"| target |\n|---|---|---|---|---|---|---|\n"
        f"| {frames} | {events} | {elapsed:.2f} | {frames / elapsed:,.0f} | {streaming:.2f} | "
        f"{frames / streaming:,.0f} | >= 1,000 |\n"
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


BENCHES = {"ttft": bench_ttft, "throughput": bench_throughput, "memory": bench_memory}
TITLES = {
    "ttft": "Harness overhead on TTFT",
    "throughput": "Logical-pacing throughput",
    "memory": "Core memory with 50 concurrent sessions",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("which", choices=[*BENCHES, "all"])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in BENCHES if args.which == "all" else [args.which]:
        body = BENCHES[name]()
        stamp = (
            f"Measured {date.today().isoformat()} on {platform.machine()}, 2 cores, "
            f"Python {platform.python_version()}; rerun: "
            f"`python bench/bench_harness.py {name} --write`.\n\n"
        )
        print(f"## {TITLES[name]}\n\n{stamp}{body}")
        if args.write:
            update_section(TITLES[name], stamp + body)


if __name__ == "__main__":
    main()

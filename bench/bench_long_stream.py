"""A one-hour stream through a native session whose context holds a few minutes of it.

    python bench/bench_long_stream.py                       # 3600 s at 1 fps, both policies
    python bench/bench_long_stream.py --seconds 600 --policy reprefill
    python bench/bench_long_stream.py --write               # results into BENCHMARKS.md

The `transformers` adapter serves a tiny random Qwen2-VL (tests/tiny_qwen2vl.py, on the
CPU) as its own process with a context of `--context` tokens; the Core (in this process,
logical pacing, `trace` profile, a SQLite store) streams one proactive record over a
synthetic video, a decision at every frame. The adapter's RSS is read every half second.
What it shows: the session runs to the end with evictions and the adapter's memory stays
flat; the model is tiny, so the times are the harness's and the cache's, not a real
model's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ["HF_HUB_OFFLINE"] = "1"

from bench.make_video import cached_video  # noqa: E402
from bench.report import update_section  # noqa: E402
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, Trigger  # noqa: E402
from streameval.core.config import EndpointConfig, RunConfig  # noqa: E402
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.run.runner import RunExecutor  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402
from tests.recording import RssSampler  # noqa: E402

OUT = REPO / "bench" / "out"
SECTION = "Long native sessions: one hour through a bounded cache"
SIDE = 224  # 64 visual tokens a frame on Qwen2-VL


@dataclass
class Result:
    policy: str
    frames: int
    evicted: int
    evictions: int
    reprefill_tokens: int
    committed_tokens: int
    wall_s: float
    rss_start_mib: float  # after the first tenth of the stream
    rss_end_mib: float
    rss_max_growth_mib: float  # the largest RSS after the first tenth, minus its start


def write_benchmark(root: Path, seconds: int) -> Path:
    video = cached_video(OUT, seconds=seconds, width=SIDE, height=SIDE, fps=1)
    record = ProactiveRecord(
        record_id="long:pro:1",
        source_id="long:pro:1",
        source_benchmark="bench",
        task_type="count",
        video_path=str(video),
        instruction="Say when the picture turns around.",
        instruction_time_s=0.0,
        triggers=(Trigger(trigger_type="event_onset", answer="now", point_s=seconds - 10.0),),
    )
    benchmark = Benchmark(name="long", version="1", video_root="/", records=[record])
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


def measure(policy: str, seconds: int, context: int, model: Path, work: Path) -> Result:
    benchmark = write_benchmark(work, seconds)
    options = {
        "model": str(model),
        "visual_tokens": 64,
        "max_tokens_proactive": 4,
        "context_tokens": context,
        "reserve_tokens": 64,
        "cache_policy": policy,
        "evict_frames": 1 if policy == "evict-oldest" else 8,
        "instruction_prompt": "{instruction} Or say {wait}.\n",
    }
    with AdapterProcess("transformers", options=options) as adapter:
        config = stream_config(benchmark, adapter.url, work)
        with Store(f"sqlite:///{work / f'{policy}.db'}") as store:
            started = time.perf_counter()
            with RssSampler(adapter.process.pid, interval_s=0.5) as sampler:
                summary = asyncio.run(execute(RunExecutor(config, store)))
            wall = time.perf_counter() - started
            if (summary.finished, summary.failed) != (1, 0):
                raise SystemExit(f"{policy}: the session did not finish ({summary})")
            events = list(store.iter_events(summary.run_id))
    workloads = [e.payload for e in events if e.kind == EventKind.WORKLOAD]
    evictions = [w for w in workloads if w.kind == "evict"]
    warm = sampler.after(1 / 10)
    return Result(
        policy=policy,
        frames=sum(e.kind == EventKind.FRAME_SENT for e in events),
        evicted=sum(len(w.frame_ids) for w in evictions),
        evictions=len(evictions),
        reprefill_tokens=sum(w.input_tokens or 0 for w in evictions),
        committed_tokens=sum(w.input_tokens or 0 for w in workloads if w.kind != "evict"),
        wall_s=wall,
        rss_start_mib=warm[0] / 2**20,
        rss_end_mib=warm[-1] / 2**20,
        rss_max_growth_mib=(max(warm) - warm[0]) / 2**20,
    )


def stream_config(benchmark: Path, url: str, work: Path, **more) -> RunConfig:
    """The Core's run: one session at a time on `url`, logical pacing, the `trace` profile
    at 1 fps, a frame cache under `work`; `more`: further RunConfig fields."""
    return RunConfig(
        benchmark=str(benchmark),
        endpoints=[EndpointConfig(url=url, concurrency=1)],
        cache_dir=str(work / "cache"),
        pacing="logical",
        profile="trace",
        fps=1.0,
        response_timeout_s=600,
        **more,
    )


async def execute(executor: RunExecutor):
    return await executor.execute(await executor.prepare())


def table(results: list[Result], seconds: int, context: int) -> str:
    lines = [
        f"`python bench/bench_long_stream.py --seconds {seconds} --context {context}` "
        f"({date.today()}, {platform.machine()}, {os.cpu_count()} CPUs): a {seconds} s "
        f"{SIDE}x{SIDE} video at 1 fps, a decision at every frame, through the `transformers` "
        f"adapter on a tiny random Qwen2-VL (CPU) with a {context}-token context "
        f"({context - 64} before a frame). Adapter RSS from the first tenth of the stream on.",
        "",
        "| cache_policy | frames | tokens committed | frames evicted (evictions) | re-prefill "
        "tokens | wall | ms/frame | adapter RSS | RSS growth (max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| `{r.policy}` | {r.frames} | {r.committed_tokens:,} | {r.evicted} "
            f"({r.evictions}) | {r.reprefill_tokens:,} | {r.wall_s:.0f} s | "
            f"{1000 * r.wall_s / r.frames:.0f} | {r.rss_start_mib:.0f} -> {r.rss_end_mib:.0f} "
            f"MiB | {r.rss_max_growth_mib:.1f} MiB |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=3600)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--policy", choices=["evict-oldest", "reprefill", "both"], default="both")
    parser.add_argument("--write", action="store_true", help="put the table in BENCHMARKS.md")
    args = parser.parse_args()
    from tests.tiny_qwen2vl import build_tiny_model

    policies = ["evict-oldest", "reprefill"] if args.policy == "both" else [args.policy]
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as temporary:
        work = Path(temporary)
        model = build_tiny_model(work / "model")
        results = []
        for policy in policies:
            print(f"{policy}: {args.seconds} frames ...", flush=True)
            results.append(measure(policy, args.seconds, args.context, model, work))
    text = table(results, args.seconds, args.context)
    print(text)
    if args.write:
        update_section(SECTION, text)


if __name__ == "__main__":
    main()

"""A native session many times longer than the adapter's context, through the Core.

The transformers adapter, served as its own process with a small context, watches a long
proactive stream: its cache policy evicts the oldest frames, so the session finishes (no
`context_full`), the adapter's memory stays flat, and every eviction is in the store as an
`evict` workload record the scorer counts.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from tests.model_stack import require_model_stack

os.environ["HF_HUB_OFFLINE"] = "1"
require_model_stack()
pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

import av  # noqa: E402
import numpy as np  # noqa: E402

from streameval.core.benchmark.records import (  # noqa: E402
    Benchmark,
    ProactiveRecord,
    Trigger,
)
from streameval.core.config import EndpointConfig, RunConfig  # noqa: E402
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.run.runner import RunExecutor  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402
from tests.recording import RssSampler  # noqa: E402
from tests.tiny_qwen2vl import build_tiny_model  # noqa: E402

SECONDS = 150  # at 1 fps: 150 frames, each a decision step
SIDE = 224  # 8x8 merged patches: 64 visual tokens a frame, 1.2 MB of float32 pixels
CONTEXT = 360
RESERVE = 60  # cache_max_tokens = 300
# What an adapter that kept every frame's pixel tensors would grow by over the session;
# the adapter's RSS after warm-up may grow by at most a fifth of it.
PIXELS_PER_FRAME = (SIDE // 14) ** 2 * 3 * 2 * 14 * 14 * 4
RSS_GROWTH_BOUND = SECONDS * PIXELS_PER_FRAME // 5  # 36 MB


def write_video(path: Path) -> None:
    """A SIDE x SIDE H.264 video at 1 fps; frame n is a moving diagonal gradient."""
    ramp = np.add.outer(np.arange(SIDE), np.arange(SIDE))
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=1)
        stream.width = stream.height = SIDE
        stream.pix_fmt = "yuv420p"
        for n in range(SECONDS):
            grey = ((ramp + 9 * n) % 256).astype(np.uint8)
            image = np.repeat(grey[:, :, None], 3, axis=2)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def write_benchmark(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_video(root / "long.mp4")
    record = ProactiveRecord(
        record_id="long:pro:1",
        source_id="long:pro:1",
        source_benchmark="test",
        task_type="count",
        video_path="long.mp4",
        instruction="Count.",
        instruction_time_s=0.0,
        triggers=(Trigger(trigger_type="event_onset", answer="1", point_s=SECONDS - 10.0),),
    )
    benchmark = Benchmark(name="long", version="1", video_root=".", records=[record])
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


@pytest.mark.parametrize("policy", ["evict-oldest", "reprefill"])
def test_a_session_ten_times_the_context_finishes_in_bounded_memory(tmp_path, policy):
    model = build_tiny_model(tmp_path / "model")
    benchmark = write_benchmark(tmp_path / "bench")
    options = {
        "model": str(model),
        "visual_tokens": 64,
        "max_tokens_proactive": 4,
        "context_tokens": CONTEXT,
        "reserve_tokens": RESERVE,
        "cache_policy": policy,
        "instruction_prompt": "{instruction} Or say {wait}.\n",
    }
    config = RunConfig(
        benchmark=str(benchmark),
        endpoints=[EndpointConfig(url="ws://unused/ws", concurrency=1)],
        cache_dir=str(tmp_path / "cache"),
        pacing="logical",
        profile="trace",
        fps=1.0,
    )
    with AdapterProcess("transformers", options=options) as adapter:
        config = config.model_copy(update={"endpoints": [EndpointConfig(url=adapter.url)]})
        with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
            with RssSampler(adapter.process.pid) as sampler:
                summary = asyncio.run(execute(config, store))
            assert (summary.finished, summary.failed) == (1, 0)
            events = list(store.iter_events(summary.run_id))
            from streameval.scorer.report import score_run

            scores = score_run(store, summary.run_id)

    frames = [e.payload.frame_id for e in events if e.kind == EventKind.FRAME_SENT]
    assert len(frames) >= SECONDS - 5
    assert not [e for e in events if e.kind == EventKind.ADAPTER_ERROR]
    records = [e.payload for e in events if e.kind == EventKind.WORKLOAD]
    committed = sum(r.input_tokens or 0 for r in records if r.kind != "evict")
    assert committed >= 10 * CONTEXT  # the stream passed through ten contexts and more
    assert [r.frame_ids for r in records if r.kind == "drop"] == []
    evictions = [r for r in records if r.kind == "evict"]
    evicted = [frame_id for r in evictions for frame_id in r.frame_ids]
    assert len(evicted) >= len(frames) - 5  # all but the newest few frames went
    assert evicted == frames[: len(evicted)]  # oldest first, each once
    if policy == "evict-oldest":
        assert {r.input_tokens for r in evictions} == {0}
    else:
        assert all(0 < r.input_tokens <= CONTEXT - RESERVE for r in evictions)
    hello = next(e.payload for e in events if e.kind == EventKind.ADAPTER_HELLO)
    assert hello.conditions.settings["cache_policy"] == policy
    assert hello.conditions.settings["cache_max_tokens"] == CONTEXT - RESERVE

    # Memory: from a third of the run (the cache has been full since the fifth frame or
    # so) to its end, the adapter's RSS grows by less than the bound.
    warm = sampler.after(1 / 3)
    growth = max(warm) - warm[0]
    print(f"{policy}: RSS after warm-up {warm[0] / 2**20:.1f} MiB, growth {growth / 2**20:.1f}")
    assert growth < RSS_GROWTH_BOUND

    workload = scores.overall["workload"]
    assert workload["evicted_frames"].value == len(evicted)


async def execute(config: RunConfig, store: Store):
    executor = RunExecutor(config, store)
    return await executor.execute(await executor.prepare())

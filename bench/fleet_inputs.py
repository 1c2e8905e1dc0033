"""The fleet bench's benchmark: QA records whose streamed lengths follow the TRACE sample's,
each over a video of its own (so each session's frames are decoded once, by its worker)."""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.make_video import make_video
from streameval.core.benchmark.records import Benchmark, QARecord
from streameval.core.benchmark.trace_release import import_release
from streameval.core.config import PROTOCOL_PROFILES, RunConfig
from streameval.core.run.session_timeline import expected_stream_s

TRACE_SAMPLE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "trace_release"


def trace_stream_lengths(directory: Path = TRACE_SAMPLE) -> list[float]:
    """Streamed video seconds of every record of the TRACE sample under profile `trace`."""
    records = import_release(directory).benchmark.records
    config = RunConfig(benchmark="trace", endpoints=[], profile="trace").resolved()
    profile = PROTOCOL_PROFILES["trace"]
    return [expected_stream_s(record, config, profile) for record in records]


def draw_lengths(sessions: int, seed: int) -> list[float]:
    """`sessions` streamed lengths drawn (seeded, with replacement) from the TRACE sample's,
    in whole seconds."""
    sample = trace_stream_lengths()
    rng = random.Random(seed)
    return [float(max(1, round(rng.choice(sample)))) for _ in range(sessions)]


def write_fleet_benchmark(
    root: Path, lengths: list[float], video_fps: int, width: int, height: int
) -> Path:
    """Session i asks its question at lengths[i] seconds of video i (streamed from 0 with
    --qa-history 0); the videos are kept under `root` and reused by later runs."""
    root.mkdir(parents=True, exist_ok=True)
    records = []
    todo = []
    for i, length in enumerate(lengths):
        name = f"v{i:04d}-{length:g}s-{width}x{height}-{video_fps}fps.mp4"
        if not (root / name).exists():
            todo.append((root / name, length + 1, i))
        records.append(
            QARecord(
                record_id=f"fleet:qa:{i:04d}",
                source_id=f"fleet:qa:{i:04d}",
                source_benchmark="fleet",
                task_type="fleet",
                video_path=name,
                question="Which?",
                options=("A. one", "B. two"),
                answer="A",
                question_time_s=length,
                evidence_anchor_s=0.0,
            )  # fmt: skip
        )
    with ThreadPoolExecutor(4) as pool:
        list(
            pool.map(
                lambda job: make_video(
                    job[0], job[1], width, height, video_fps, gop=4 * video_fps, seed=job[2]
                ),
                todo,
            )
        )
    benchmark = Benchmark(name="fleet", version="1", video_root=".", records=records)
    path = root / f"benchmark-{len(lengths)}.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path

"""A tiny hand-written benchmark (one real PyAV video, exact times) for Core tests."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np

from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Trigger

VIDEO_SECONDS = 20
VIDEO_FPS = 10


def write_video(path: Path, seconds: int = VIDEO_SECONDS, fps: int = VIDEO_FPS) -> None:
    """A 64x48 H.264 video whose frame n is a flat grey of value (n * 7) % 256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for n in range(seconds * fps):
            image = np.full((48, 64, 3), (n * 7) % 256, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


QA = QARecord(
    record_id="t:qa:1",
    source_id="t:qa:1",
    source_benchmark="test",
    task_type="present",
    video_path="v.mp4",
    question="Which?",
    options=("A. one", "B. two"),
    answer="A",
    question_time_s=17.0,
    evidence_anchor_s=15.0,
)
QA_EARLY = QA.model_copy(
    update={"record_id": "t:qa:2", "question_time_s": 6.4, "evidence_anchor_s": 3.0}
)
PROACTIVE = ProactiveRecord(
    record_id="t:pro:1",
    source_id="t:pro:1",
    source_benchmark="test",
    task_type="count",
    video_path="v.mp4",
    instruction="Say the count when it changes.",
    instruction_time_s=4.0,
    triggers=(
        Trigger(trigger_type="event_onset", answer="2", point_s=8.0),
        Trigger(trigger_type="event_onset", answer="3", point_s=12.0),
    ),
)


def write_benchmark(root: Path, records=(QA, QA_EARLY, PROACTIVE)) -> Path:
    write_video(root / "v.mp4")
    benchmark = Benchmark(name="test", version="1", video_root=".", records=list(records))
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path

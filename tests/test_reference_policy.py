"""The reference policy answers the synthetic benchmark from pixels alone.

Frames are prepared the way the Core prepares them: sample k at t = k / fps shows source
frame floor(t * 10 + 0.5), resized inside PyAV's conversion (AREA) when the width is capped,
then JPEG q90 with Pillow; the policy gets them decoded back to RGB.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from streameval.adapters.reference_policy import Blob, ReferencePolicy, find_blobs, summarise
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord
from streameval.core.benchmark.synthetic import (
    BACKGROUND_RGB,
    PALETTE,
    Q_LAST_DIGIT,
    Q_PRESENT_DIGIT,
    load_or_generate,
    render_digit,
)

SOURCE_FPS = 10
FINEST_STEP_S = 0.5  # frames are prepared on this grid; 1 and 2 fps are subsets of it
CONDITIONS = [(1.0, 320), (2.0, 320), (1.0, 160), (2.0, 160)]  # (fps, frame width)
TOLERANCE_S = 5.0


@pytest.fixture(scope="module")
def benchmark(tmp_path_factory: pytest.TempPathFactory) -> Benchmark:
    # Shared by every test module of the session (test_synthetic.py uses it too).
    return load_or_generate(tmp_path_factory.getbasetemp() / "synthetic-seed-0", seed=0)


def _jpeg(frame: av.VideoFrame, width: int) -> bytes:
    height = round(frame.height * width / frame.width)
    rgb = frame.reformat(width=width, height=height, format="rgb24", interpolation="AREA")
    buffer = io.BytesIO()
    Image.fromarray(rgb.to_ndarray()).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def jpegs(benchmark: Benchmark) -> dict[tuple[str, int], dict[float, bytes]]:
    """(video, width) -> {t: JPEG} for t on the 0.5 s grid, each video decoded once."""
    out: dict[tuple[str, int], dict[float, bytes]] = {}
    per_source_frame = round(FINEST_STEP_S * SOURCE_FPS)
    for video in sorted({r.video_path for r in benchmark.records}):
        with av.open(str(Path(benchmark.video_root) / video)) as container:
            for index, frame in enumerate(container.decode(video=0)):
                if index % per_source_frame:
                    continue
                t = index / SOURCE_FPS  # the sample at t shows floor(t * 10 + 0.5) = index
                for width in {w for _, w in CONDITIONS}:
                    out.setdefault((video, width), {})[t] = _jpeg(frame, width)
    return out


def _frames(jpegs, video: str, width: int, fps: float, start: float, end: float) -> Iterator:
    """(t, rgb) for the samples k / fps in [start, end], as the Core would deliver them."""
    samples = jpegs[(video, width)]
    for k in range(math.ceil(start * fps - 1e-9), math.floor(end * fps + 1e-9) + 1):
        t = k / fps
        if t in samples:
            yield t, np.asarray(Image.open(io.BytesIO(samples[t])).convert("RGB"))


def _ask(jpegs, record: QARecord, fps: float, width: int, history_s: float) -> str:
    policy = ReferencePolicy()
    start = 0.0 if history_s == 0 else max(0.0, record.evidence_anchor_s - history_s)
    for t, rgb in _frames(jpegs, record.video_path, width, fps, start, record.question_time_s):
        policy.observe(t, rgb)
    return policy.answer(record.question, record.options)


def _monitor(jpegs, record: ProactiveRecord, fps: float, width: int) -> list[tuple[float, str]]:
    """Frames from 0; instruct after the last frame at or before the instruction, then
    decide() after that frame and every later one, up to the last window end."""
    policy = ReferencePolicy()
    said: list[tuple[float, str]] = []
    instructed = False
    end = record.last_window_end_s(TOLERANCE_S)
    for t, rgb in _frames(jpegs, record.video_path, width, fps, 0.0, end):
        policy.observe(t, rgb)
        if not instructed and t + 1 / fps > record.instruction_time_s:
            policy.instruct(record.instruction)
            instructed = True
        if instructed and (text := policy.decide()) is not None:
            said.append((t, text))
    return said


def _windows(record: ProactiveRecord) -> list[tuple[float, float]]:
    """Target windows: [t_i, min(t_i + 5, t_next)) for points, the interval for states."""
    starts = [trigger.start_s for trigger in record.triggers]
    windows = []
    for trigger in record.triggers:
        if trigger.is_state:
            windows.append((trigger.interval_start_s, trigger.interval_end_s))
        else:
            later = [s for s in starts if s > trigger.point_s]
            windows.append((trigger.point_s, min([trigger.point_s + TOLERANCE_S, *later])))
    return windows


# ----------------------------------------------------------------------------- whole benchmark


@pytest.mark.parametrize(("fps", "width"), CONDITIONS)
def test_answers_every_question(benchmark, jpegs, fps: float, width: int) -> None:
    records = [r for r in benchmark.records if isinstance(r, QARecord)]
    wrong = {
        r.record_id: (got, r.answer)
        for r in records
        if (got := _ask(jpegs, r, fps, width, history_s=10.0)) != r.answer
    }
    assert wrong == {}
    assert len(records) == 16


def test_answers_every_question_with_the_full_prefix(benchmark, jpegs) -> None:
    records = [r for r in benchmark.records if isinstance(r, QARecord)]
    wrong = {
        r.record_id: (got, r.answer)
        for r in records
        if (got := _ask(jpegs, r, 1.0, 320, history_s=0.0)) != r.answer
    }
    assert wrong == {}


@pytest.mark.parametrize(("fps", "width"), CONDITIONS)
def test_speaks_once_inside_every_window(benchmark, jpegs, fps: float, width: int) -> None:
    records = [r for r in benchmark.records if isinstance(r, ProactiveRecord)]
    assert len(records) == 4
    for record in records:
        said = _monitor(jpegs, record, fps, width)
        assert [text for _, text in said] == [t.answer for t in record.triggers], record.record_id
        for (onset, _), (lo, hi) in zip(said, _windows(record), strict=True):
            assert lo <= onset < hi, (record.record_id, onset, (lo, hi))


def test_count_changes_are_said_one_sample_after_them_at_1fps(benchmark, jpegs) -> None:
    """At 1 fps the first frame showing a change is the next whole second."""
    record = next(r for r in benchmark.records if r.task_type == "count_change")
    said = _monitor(jpegs, record, 1.0, 320)
    assert [t for t, _ in said] == [float(math.ceil(t.point_s)) for t in record.triggers]


def test_silent_before_the_first_trigger(benchmark, jpegs) -> None:
    for record in (r for r in benchmark.records if isinstance(r, ProactiveRecord)):
        policy = ReferencePolicy()
        decisions = []
        instructed = False
        frames = _frames(jpegs, record.video_path, 320, 2.0, 0.0, record.triggers[0].start_s)
        for t, rgb in frames:
            if t >= record.triggers[0].start_s:
                break
            policy.observe(t, rgb)
            decisions.append(policy.decide())  # before the instruction: nothing to monitor
            if not instructed and t >= record.instruction_time_s:
                policy.instruct(record.instruction)
                instructed = True
            if instructed:
                decisions.append(policy.decide())
        assert len(decisions) > 2 * record.instruction_time_s
        assert decisions == [None] * len(decisions), record.record_id


# ----------------------------------------------------------------------------- unit behaviour


def test_without_evidence_it_chooses_unable_to_answer() -> None:
    options = ["A. 3", "B. 7", "C. Unable to answer"]
    assert ReferencePolicy().answer(Q_LAST_DIGIT, options) == "C"
    assert ReferencePolicy().answer(Q_PRESENT_DIGIT, options) == "C"
    assert ReferencePolicy().answer("What is the capital of France?", options) == "C"
    assert ReferencePolicy().answer(Q_LAST_DIGIT, []) == "Unable to answer"
    # No supported option and no way out: the first label is a guess, never an invented one.
    assert ReferencePolicy().answer(Q_LAST_DIGIT, ["A. 3", "B. 7"]) == "A"


def test_unknown_instruction_keeps_it_silent(benchmark, jpegs) -> None:
    record = next(r for r in benchmark.records if r.task_type == "count_change")
    policy = ReferencePolicy()
    policy.instruct("Tell me whenever something interesting happens.")
    for t, rgb in _frames(jpegs, record.video_path, 320, 1.0, 0.0, 30.0):
        policy.observe(t, rgb)
        assert policy.decide() is None


def _digit_image(value: int, width: int) -> np.ndarray:
    canvas = np.zeros((240, 320), np.uint8)
    render_digit(canvas, value, 262, 80, ink=1)
    rgb = np.where(canvas[..., None] == 1, PALETTE["white"], BACKGROUND_RGB).astype(np.uint8)
    image = Image.fromarray(rgb).resize((width, width * 3 // 4), Image.Resampling.BOX)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return np.asarray(Image.open(io.BytesIO(buffer.getvalue())).convert("RGB"))


@pytest.mark.parametrize("width", [320, 160])
def test_reads_all_ten_digits(width: int) -> None:
    read = [summarise(0.0, _digit_image(value, width)).digit for value in range(10)]
    assert read == list(range(10))


def test_components_are_four_connected_and_merge_through_later_rows() -> None:
    classes = np.array(
        [
            [1, 0, 1, 0, 0, 2],
            [1, 0, 1, 0, 2, 0],  # the two 2s touch only diagonally: two blobs
            [1, 1, 1, 0, 0, 0],  # the U of 1s joins here, below both arms
            [0, 0, 0, 3, 3, 1],  # 3 touches the 1 only through a different class
        ],
        dtype=np.uint8,
    )
    blobs = sorted(find_blobs(classes), key=lambda b: (b.colour, b.y0, b.x0))
    assert blobs == [
        Blob(colour=1, x0=0, y0=0, x1=3, y1=3, area=7, top_area=4),
        Blob(colour=1, x0=5, y0=3, x1=6, y1=4, area=1, top_area=1),
        Blob(colour=2, x0=5, y0=0, x1=6, y1=1, area=1, top_area=1),
        Blob(colour=2, x0=4, y0=1, x1=5, y1=2, area=1, top_area=1),
        Blob(colour=3, x0=3, y0=3, x1=5, y1=4, area=2, top_area=2),
    ]
    assert find_blobs(np.zeros((3, 4), np.uint8)) == []


def test_observe_is_fast(benchmark, jpegs) -> None:
    video = benchmark.records[0].video_path
    frames = [rgb for _, rgb in _frames(jpegs, video, 320, 2.0, 0.0, 40.0)]
    policy = ReferencePolicy()
    started = time.perf_counter()
    for rgb in frames:
        policy.observe(0.0, rgb)
    per_frame_ms = (time.perf_counter() - started) / len(frames) * 1000
    assert len(frames) == 80
    assert per_frame_ms < 5.0

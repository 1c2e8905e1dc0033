"""Negative streams: a proactive record's instruction over a stretch of its own video with no
event. The stretches avoid every window (with its margin) of every record of the video, are
drawn the same for a seed, and a run of the `always` adapter (real Core and adapter
processes) gives the false-alarm rate per hour computed by hand from the stored frames."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Trigger
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.negative_streams import negative_records
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.scorer.report import score_run
from streameval.variants import variant_record_id
from tests.timeline_fixtures import write_video

TOLERANCE, LEAD = 2.0, 5.0


def proactive(record_id: str, video: str, instruction_s: float, *triggers: Trigger):
    return ProactiveRecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="test",
        task_type="count",
        video_path=video,
        instruction=f"Say when it changes ({record_id}).",
        instruction_time_s=instruction_s,
        triggers=triggers,
    )


def qa(record_id: str, video: str, question_s: float) -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="test",
        task_type="present",
        video_path=video,
        question="Which?",
        options=("A. one", "B. two"),
        answer="A",
        question_time_s=question_s,
        evidence_anchor_s=question_s,
    )


def point(t: float, **extra) -> Trigger:
    return Trigger(trigger_type="event_onset", answer="x", point_s=t, **extra)


# v.mp4: events with their margin at [28, 34], [48, 62] (a state interval) and [73, 87] (an
# annotated window end at 85 and evidence from 75); a question at 200 s shows the video runs
# that far. Free: [0, 28], [34, 48], [62, 73], [87, 200].
R1 = proactive(
    "r1",
    "v.mp4",
    10.0,
    point(30.0),
    Trigger(trigger_type="state_interval", answer="s", interval_start_s=50.0, interval_end_s=60.0),
)
R2 = proactive("r2", "v.mp4", 5.0, point(80.0, window_end_s=85.0, evidence_start_s=75.0))
EVENTS_V = [(28.0, 34.0), (48.0, 62.0), (73.0, 87.0)]
# u.mp4: one event at [38, 44]; the annotated part ends at 42 s, so only [0, 38] is free,
# shorter than r4's 42 s: r4's negative stream is that whole stretch.
R4 = proactive("r4", "u.mp4", 0.0, point(40.0))
# w.mp4: an event at [0.5, 6.5] and nothing annotated after it: no room.
R3 = proactive("r3", "w.mp4", 1.0, point(2.5))
RECORDS = [R1, R2, qa("q", "v.mp4", 200.0), R3, R4]


def streamed(negative: ProactiveRecord) -> tuple[float, float]:
    """The video the Core streams for it: from instruction - lead to its end."""
    return max(0.0, negative.instruction_time_s - LEAD), negative.stream_end_s


@pytest.mark.parametrize("seed", range(40))
def test_a_negative_stream_overlaps_no_window_of_its_video(seed: int) -> None:
    negatives = dict(
        (base, negative)
        for negative, base in negative_records(
            RECORDS, tolerance_s=TOLERANCE, seed=seed, lead_s=LEAD
        )
    )
    assert sorted(negatives) == ["r1", "r2", "r4"]  # r3's video has no room
    for base in ("r1", "r2"):
        start, end = streamed(negatives[base])
        assert start >= 0.0 and end <= 200.0
        for low, high in EVENTS_V:
            assert end <= low or start >= high, (base, start, end, low, high)
    # As long as the record's own stream: instruction - lead to its last window end.
    length = {base: n.stream_end_s - n.instruction_time_s for base, n in negatives.items()}
    assert length["r1"] == pytest.approx(50.0) and length["r2"] == pytest.approx(80.0)
    # Only [87, 200] holds them: the instruction after its lead-in, the end inside it.
    assert 92.0 <= negatives["r1"].instruction_time_s <= 150.0
    assert 92.0 <= negatives["r2"].instruction_time_s <= 120.0
    assert (negatives["r4"].instruction_time_s, negatives["r4"].stream_end_s) == (0.0, 38.0)


def test_a_negative_record_is_the_same_task_with_no_trigger_and_an_opaque_id() -> None:
    [(negative, base), *_] = negative_records(RECORDS, tolerance_s=TOLERANCE, seed=3, lead_s=LEAD)
    assert base == "r1"
    assert negative.record_id == variant_record_id("r1", "negative", 3)
    assert negative.instruction == R1.instruction and negative.task_type == R1.task_type
    assert negative.video_path == R1.video_path
    assert negative.triggers == () and negative.probes == ()
    assert negative.last_window_end_s(TOLERANCE) == negative.stream_end_s
    dumped = negative.model_dump(mode="json")
    assert dumped["stream_end_s"] == negative.stream_end_s
    assert ProactiveRecord.model_validate(dumped) == negative
    assert "stream_end_s" not in R1.model_dump(mode="json")  # a benchmark record as before


def test_a_record_left_out_of_the_selection_still_has_its_event_avoided() -> None:
    """A selection streams r1 and q only; r2's event at [73, 87] must still be avoided."""
    selected = [R1, RECORDS[2]]
    for seed in range(40):
        [(negative, _)] = negative_records(
            selected, avoiding=RECORDS, tolerance_s=TOLERANCE, seed=seed, lead_s=LEAD
        )
        start, end = streamed(negative)
        for low, high in EVENTS_V:
            assert end <= low or start >= high, (seed, start, end, low, high)
    # Without the rest of the benchmark, r1's stream may fall on r2's event.
    alone = [
        negative_records(selected, tolerance_s=TOLERANCE, seed=s, lead_s=LEAD) for s in range(40)
    ]
    assert any(streamed(n)[0] < 87.0 and streamed(n)[1] > 73.0 for [(n, _)] in alone)


def test_the_same_seed_draws_the_same_stretches() -> None:
    def draw(seed: int, records=RECORDS) -> dict[str, tuple[float, float]]:
        return {
            base: (negative.instruction_time_s, negative.stream_end_s)
            for negative, base in negative_records(
                records, tolerance_s=TOLERANCE, seed=seed, lead_s=LEAD
            )
        }

    assert draw(5) == draw(5)
    assert draw(5)["r1"] != draw(6)["r1"]
    # A record's draw does not depend on the other videos' records passed with it.
    assert draw(5, [R1, R2, RECORDS[2]]) == {k: v for k, v in draw(5).items() if k != "r4"}
    spread = {draw(seed)["r1"][0] for seed in range(20)}
    assert len(spread) == 20 and min(spread) < 110.0 < max(spread)


# --------------------------------------------------------------------------- a real run


def write_negative_benchmark(root: Path) -> Path:
    """Two 30 s videos, one proactive record each whose events come late: room before them.
    v.mp4: instruction 20 s, event 25 s (margin: [20, 35]), annotated to 30 s: free [0, 20].
    w.mp4: instruction 18 s, event 24 s (margin: [19, 34]), annotated to 29 s: free [0, 19]."""
    for name in ("v.mp4", "w.mp4"):
        write_video(root / name, seconds=30)
    records = [
        proactive("pv", "v.mp4", 20.0, point(25.0)),
        proactive("pw", "w.mp4", 18.0, point(24.0)),
    ]
    benchmark = Benchmark(name="negatives", version="1", video_root=".", records=records)
    path = root / "benchmark.json"
    path.write_text(json.dumps(benchmark.model_dump(mode="json")))
    return path


def test_the_always_adapter_on_negative_streams_scores_its_false_alarms_per_hour(
    tmp_path: Path,
) -> None:
    benchmark = write_negative_benchmark(tmp_path / "bench")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with AdapterProcess("always") as adapter:
        done = subprocess.run(
            [sys.executable, "-m", "streameval.cli", "run", "--adapter-url", adapter.url]
            + ["--benchmark", str(benchmark), "--perturb", "negative", "--perturb-seed", "4"]
            + ["--json", "--store", url],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    with Store(url, read_only=True) as store:
        records = {r["record_id"]: r for r in store.records(run_id)}
        negatives = {base: records[variant_record_id(base, "negative", 4)] for base in ("pv", "pw")}
        alarms, watched = 0, 0.0
        for base, negative in negatives.items():
            instruction, end = negative["instruction_time_s"], negative["stream_end_s"]
            # By hand: 1 fps frames at whole seconds from instruction - 5 s to the end; the
            # instruction after the last frame at or before it, a step after each frame
            # from there on, and the adapter answers every step.
            frames = list(range(math.ceil(max(0.0, instruction - LEAD)), math.floor(end) + 1))
            steps = [t for t in frames if t >= math.floor(instruction)]
            events = list(store.iter_events(run_id, negative["record_id"]))
            sent = [e.payload.t for e in events if e.kind == EventKind.FRAME_SENT]
            assert sent == [float(t) for t in frames], base
            assert sum(1 for e in events if e.kind == EventKind.STEP_SENT) == len(steps)
            alarms += len(steps)
            watched += frames[-1] - instruction
            assert end <= 20.0 if base == "pv" else end <= 19.0  # before the event's margin
        scores = score_run(store, run_id, "trace-paper-v1")
    negative = scores.negative_streams
    assert (negative.records, negative.sessions, negative.false_alarms) == (2, 2, alarms)
    assert negative.hours == pytest.approx(watched / 3600)
    assert negative.false_alarms_per_hour == pytest.approx(alarms / watched * 3600)
    assert set(scores.by_variant) == {"clean"}
    assert scores.by_variant["clean"] == scores.overall
    assert scores.overall["proactive"]["completion_rate"].population == 2  # clean records

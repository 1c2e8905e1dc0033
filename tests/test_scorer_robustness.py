"""Scoring a robustness run: every metric per variant next to clean, negative streams as false
alarms per hour, on a run built by hand with numbers computed by hand; a plain run is scored
as before."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from streameval.adapters.reference import ReferenceAdapter
from streameval.adapters.sdk import Frame, Session
from streameval.cli import app
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.scorer.eventlog import SessionLog
from streameval.scorer.metrics.explain import explain
from streameval.scorer.profiles import SCORING_PROFILES, get_profile
from streameval.scorer.report import score_run
from streameval.scorer.service.api import create_app
from streameval.variants import (
    CONDITION_KEY,
    RobustnessCondition,
    Variant,
    read_condition,
    variant_record_id,
)
from tests.test_cli import streameval

SEED = 11
DROP = "drop:p=0.5"
CONDITION = RobustnessCondition(
    seed=SEED,
    variants=(
        Variant(label=DROP, kind="perturbation", params={"p": 0.5}),
        Variant(label="negative", kind="negative", params={}),
    ),
)
CONFIG = {"profile": "trace", "pacing": "logical", "proactive_tolerance_s": 5.0}

QA = QARecord(
    record_id="qa",
    source_id="qa",
    source_benchmark="test",
    task_type="OCR",
    video_path="vq.mp4",
    question="Which colour?",
    options=("A. red", "B. blue"),
    answer="B",
    question_time_s=8.0,
    evidence_anchor_s=4.0,
)
# Windows (tolerance 5 s): A [5, 10) and [12, 17); B [5, 10).
PRO_A = ProactiveRecord(
    record_id="pro-a",
    source_id="pro-a",
    source_benchmark="test",
    task_type="REC",
    video_path="va.mp4",
    instruction="Tell me each new step.",
    instruction_time_s=0.0,
    triggers=(
        Trigger(trigger_type="event_onset", answer="1", point_s=5.0),
        Trigger(trigger_type="event_onset", answer="2", point_s=12.0),
    ),
)
PRO_B = PRO_A.model_copy(
    update={
        "record_id": "pro-b",
        "source_id": "pro-b",
        "video_path": "vb.mp4",
        "triggers": (Trigger(trigger_type="event_onset", answer="1", point_s=5.0),),
    }
)


def copy(record, label: str, **update):
    return record.model_copy(
        update={"record_id": variant_record_id(record.record_id, label, SEED), **update}
    )


def negative(record: ProactiveRecord, instruction_s: float, end_s: float) -> ProactiveRecord:
    return copy(
        record, "negative", instruction_time_s=instruction_s, triggers=(), stream_end_s=end_s
    )


def qa_log(run_id: str, record: QARecord, answer: str) -> SessionLog:
    log = SessionLog(run_id, record.record_id).start()
    for t in range(4, 9):
        log.frame(float(t))
    log.question(record)
    log.respond(answer)
    log.finish()
    return log


def proactive_log(
    run_id: str, record: ProactiveRecord, first_s: float, last_s: float, said: dict[float, str]
) -> SessionLog:
    """Frames every second from `first_s` to `last_s`, the instruction at its time, a step
    after each frame from then on; the adapter says said[t] at frame t, else stays silent."""
    log = SessionLog(run_id, record.record_id).start()
    t = first_s
    while t <= last_s:
        log.frame(t)
        if t == record.instruction_time_s:
            log.instruction(record)
        if t >= record.instruction_time_s:
            log.step()
            if t in said:
                log.respond(said[t])
            else:
                log.silent()
        t += 1.0
    log.finish()
    return log


def negative_a_log(run_id: str, record: ProactiveRecord) -> SessionLog:
    """Negative stream A, watched 20 s to 35 s: two answers after the instruction; an empty
    one (no answer) and one before the instruction count for nothing."""
    log = SessionLog(run_id, record.record_id).start()
    log.frame(18.0)
    log.frame(19.0)
    log.respond("early")
    for t in range(20, 36):
        log.frame(float(t))
        if t == 20:
            log.instruction(record)
        log.step()
        if t in (22, 25, 30):
            log.respond("" if t == 30 else "yes")
        else:
            log.silent()
    log.finish()
    return log


def store_robustness_run(store: Store, run_id: str, condition: dict | None) -> list:
    """Clean: QA right, every window answered right. drop:p=0.5: QA wrong, A's second window
    missed, B's answered a second later. Negative streams: A's watched 15 s with 2 answers,
    B's watched 9 s with 1."""
    neg_a, neg_b = negative(PRO_A, 20.0, 35.0), negative(PRO_B, 30.0, 39.0)
    logs = [
        qa_log(run_id, QA, "B"),
        proactive_log(run_id, PRO_A, 0.0, 17.0, {6.0: "1", 13.0: "2"}),
        proactive_log(run_id, PRO_B, 0.0, 10.0, {6.0: "1"}),
        qa_log(run_id, copy(QA, DROP), "A"),
        proactive_log(run_id, copy(PRO_A, DROP), 0.0, 17.0, {6.0: "1"}),
        proactive_log(run_id, copy(PRO_B, DROP), 0.0, 10.0, {7.0: "1"}),
        negative_a_log(run_id, neg_a),
        proactive_log(run_id, neg_b, 30.0, 39.0, {39.0: "done"}),
    ]
    records = [
        QA,
        PRO_A,
        PRO_B,
        copy(QA, DROP),
        copy(PRO_A, DROP),
        copy(PRO_B, DROP),
        neg_a,
        neg_b,
    ]
    conditions = {} if condition is None else {CONDITION_KEY: condition}
    store.create_run(run_id, "handwritten", CONFIG, conditions)
    store.add_records(run_id, [record.model_dump(mode="json") for record in records])
    store.add_sessions(run_id, [(r.record_id, [r.record_id]) for r in records])
    for log in logs:
        store.append_events(log.events)
        store.set_session_status(run_id, log.session_id, "finished")
    store.set_run_status(run_id, "finished")
    return records


@pytest.fixture
def store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 'store.db'}") as opened:
        store_robustness_run(opened, "robust", CONDITION.model_dump(mode="json"))
        yield opened


def values(families: dict, family: str) -> dict[str, float | None]:
    return {name: metric.value for name, metric in families[family].items()}


def test_each_variant_is_scored_on_its_own_records(store: Store) -> None:
    scores = score_run(store, "robust", "trace-paper-v1")
    assert scores.records_scored == 8
    assert list(scores.by_variant) == ["clean", DROP]  # negative streams are no column
    clean, drop = scores.by_variant["clean"], scores.by_variant[DROP]
    assert clean == scores.overall
    assert values(clean, "qa")["accuracy"] == 1.0
    assert values(drop, "qa")["accuracy"] == 0.0
    # Windows: clean 3 of 3 answered right; drop 2 of 3 (A's second missed).
    assert values(clean, "proactive")["in_window_accuracy"] == 1.0
    assert values(drop, "proactive")["in_window_accuracy"] == pytest.approx(2 / 3)
    assert values(drop, "proactive")["miss_rate"] == pytest.approx(1 / 3)
    assert drop["proactive"]["miss_rate"].population == 3
    assert clean["proactive"]["completion_rate"].population == 2  # records, negatives not in
    # B's drop copy answered at 7 s instead of 6 s: the video delay median moves by 0.5 s.
    both_clocks = get_profile("trace-paper-v1").with_overrides(
        response_delay_clocks=("runtime", "video")
    )
    delays = score_run(store, "robust", both_clocks).by_variant
    assert values(delays["clean"], "proactive")["median_response_delay_video_s"] == 1.0
    assert values(delays[DROP], "proactive")["median_response_delay_video_s"] == 1.5
    assert scores.by_task_type["OCR"]["qa"]["accuracy"].population == 1  # clean only
    assert any(note.startswith("robustness run: overall, per task type") for note in scores.notes)


def test_negative_streams_give_false_alarms_per_hour(store: Store) -> None:
    negative = score_run(store, "robust", "trace-paper-v1").negative_streams
    assert negative is not None
    assert (negative.records, negative.sessions, negative.false_alarms) == (2, 2, 3)
    assert negative.hours == pytest.approx((15 + 9) / 3600)
    assert negative.false_alarms_per_hour == pytest.approx(3 / 24 * 3600)  # 450
    # Resampling the two videos: A alone 480 per hour, B alone 400, both 450.
    assert negative.ci95 == pytest.approx((400.0, 480.0))


def test_clean_numbers_equal_a_plain_run_of_the_clean_records(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 'plain.db'}") as plain:
        store_robustness_run(plain, "plain", None)
        full = score_run(plain, "plain", "trace-paper-v1")
        assert full.by_variant is None and full.negative_streams is None
        assert "by_variant" not in full.to_json() and "negative_streams" not in full.to_json()
    with Store(f"sqlite:///{tmp_path / 'clean.db'}") as only_clean:
        only_clean.create_run("clean", "handwritten", CONFIG)
        records = [QA, PRO_A, PRO_B]
        only_clean.add_records("clean", [r.model_dump(mode="json") for r in records])
        only_clean.add_sessions("clean", [(r.record_id, [r.record_id]) for r in records])
        only_clean.append_events(
            [
                *qa_log("clean", QA, "B").events,
                *proactive_log("clean", PRO_A, 0.0, 17.0, {6.0: "1", 13.0: "2"}).events,
                *proactive_log("clean", PRO_B, 0.0, 10.0, {6.0: "1"}).events,
            ]
        )
        only_clean.set_run_status("clean", "finished")
        expected = score_run(only_clean, "clean", "trace-paper-v1")
    with Store(f"sqlite:///{tmp_path / 'robust.db'}") as robust:
        store_robustness_run(robust, "robust", CONDITION.model_dump(mode="json"))
        scores = score_run(robust, "robust", "trace-paper-v1")
    assert scores.overall == expected.overall  # values, populations and intervals
    assert scores.by_task_type == expected.by_task_type


def test_every_profile_scores_a_run_with_negative_streams(store: Store) -> None:
    for name in SCORING_PROFILES:
        scores = score_run(store, "robust", name)
        assert scores.negative_streams is not None, name
        assert scores.negative_streams.false_alarms == 3, name
        assert set(scores.by_variant) == {"clean", DROP}, name


def test_the_score_output_shows_each_variant_beside_clean_in_80_columns(store: Store) -> None:
    scores = score_run(store, "robust", "trace-paper-v1")
    console = Console(file=io.StringIO(), width=80, color_system=None)
    scores.render(console)
    lines = console.file.getvalue().splitlines()
    assert all(cell_len(line) <= 80 for line in lines), lines
    variants = lines[lines.index("per variant (value, and its difference to clean)") :]
    assert variants[1].split() == ["metric", "clean", DROP]
    rows = {line.split()[0]: line.split()[1:] for line in variants[3:] if line.strip()}
    assert rows["accuracy"] == ["1", "0", "(-1)"]
    assert rows["in_window_accuracy"] == ["1", "0.6667", "(-0.3333)"]
    assert rows["miss_rate"] == ["0", "0.3333", "(+0.3333)"]
    assert rows["submitted_images"] == ["-", "-"]
    assert (
        "negative streams: 2 sessions, 0.006667 h watched, 3 false alarms: 450 per hour, "
        "95% CI [400, 480]"
    ) in " ".join(line.strip() for line in lines)


def test_score_json_and_the_results_api_carry_variants_and_negative_streams(
    tmp_path: Path, store: Store
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    printed = CliRunner().invoke(app, ["score", "robust", "--json", "--explain", "--store", url])
    assert printed.exit_code == 0, printed.output
    body = json.loads(printed.stdout)
    assert body["by_variant"][DROP]["qa"]["accuracy"]["value"] == 0.0
    assert body["negative_streams"]["false_alarms_per_hour"] == pytest.approx(450.0)
    assert body["explain"]["negative_streams"]["false_alarms_per_hour"]["unit"] == "per hour"
    with TestClient(create_app(url)) as client:
        metrics = client.get("/runs/robust/metrics").json()
        assert metrics["by_variant"] == body["by_variant"]
        assert metrics["negative_streams"] == body["negative_streams"]
        helps = {(e["family"], e["name"]) for e in client.get("/metrics/help").json()}
    assert ("negative_streams", "false_alarms_per_hour") in helps
    for name in ("sessions", "hours", "false_alarms", "false_alarms_per_hour"):
        assert explain(f"negative_streams.{name}") is not None


class OddFramesSkipped(ReferenceAdapter):
    """The reference adapter, which never takes a frame of an odd index."""

    async def on_frame(self, session: Session, frame: Frame) -> None:
        if frame.index % 2 == 0:
            await super().on_frame(session, frame)


DUPLICATE = "duplicate:p=0.5"


@pytest.mark.parametrize(
    ("adapter", "dropped"),
    [("reference", 0), ("tests.test_scorer_robustness:OddFramesSkipped", 19)],
)
def test_duplicated_frames_are_not_dropped_frames_in_a_real_run(
    adapter: str, dropped: int, benchmark_path: Path, tmp_path: Path, adapter_env: Path
) -> None:
    """`streameval run --perturb duplicate:p=0.5` through the Core: the copies of the
    duplicated frames count as deliveries, and as drops only when the adapter skipped them."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess(adapter) as process:
        ran = streameval(
            "run", "--adapter-url", process.url, "--benchmark", str(benchmark_path),
            "--perturb", DUPLICATE, "--json", "--store", url,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    scored = streameval("score", run_id, "--json", "--store", url)
    assert scored.returncode == 0, scored.stderr
    workload = json.loads(scored.stdout)["by_variant"][DUPLICATE]["workload"]
    # Expected from what the Core recorded: each duplicate session's frames, and which
    # of them the adapter never took (the odd ones, for the skipping adapter).
    with Store(url) as store:
        labels = read_condition(store.get_run(run_id).conditions).labels(
            [session.session_id for session in store.sessions(run_id)]
        )
        sent = [
            (event.session_id, event.payload.index)
            for event in store.iter_events(run_id)
            if event.kind == EventKind.FRAME_SENT and labels[event.session_id] == DUPLICATE
        ]
    frames = set(sent)
    skipped = {frame for frame in frames if frame[1] % 2} if dropped else set()
    assert (len(sent), len(frames), len(skipped)) == (58, 38, dropped)
    assert workload["delivered_frames"]["value"] == len(sent)
    assert workload["unique_submitted_frames"]["value"] == len(frames) - len(skipped)
    assert workload["dropped_frames"]["value"] == len(skipped)

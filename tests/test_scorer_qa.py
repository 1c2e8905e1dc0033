"""TRACE QA metrics and workload on hand-computed cases."""

from __future__ import annotations

import pytest

from streameval.core.benchmark.records import QARecord
from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, memory_source
from streameval.scorer.metrics.qa import evaluate_qa
from streameval.scorer.metrics.workload import evaluate_workload
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import evaluate_source, scores_of

PAPER = SCORING_PROFILES["trace-paper-v1"]
STRICT = SCORING_PROFILES["trace-strict"]
EXTENDED = SCORING_PROFILES["trace-extended"]
S = 1_000_000_000


def question(record_id: str = "q1", answer: str = "B", video: str = "v1") -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=video,
        source_benchmark="handwritten",
        task_type="EPM",
        video_path=f"{video}.mp4",
        question="Which colour?",
        options=("A. red", "B. blue", "C. green", "D. pink"),
        answer=answer,
        question_time_s=30.5,
        evidence_anchor_s=25.0,
    )


def asked(rec: QARecord, *answers: str, start_ns: int = 10 * S) -> SessionLog:
    """Frames 20..30 s, the question at start + 1 s, each answer 0.25 s / 0.75 s later."""
    log = SessionLog("run", rec.record_id, start_ns=start_ns).start()
    for t in range(20, 31):
        log.frame(float(t))
    sent = log.question(rec, ns=start_ns + S)
    for n, text in enumerate(answers):
        log.respond(text, onset_ns=sent + (n + 1) * S // 4, final_ns=sent + (n + 3) * S // 4)
    return log


def test_ttft_and_latency_run_from_question_arrival() -> None:
    rec = question()
    log = asked(rec, "The answer is B")
    log.finish()
    result = evaluate_qa(assemble_one("q1", log.rows()), rec, PAPER)
    assert result.ttft_s == pytest.approx(0.25)
    assert result.latency_s == pytest.approx(0.75)
    assert (result.parsed, result.correct, result.invalid) == ("B", True, False)
    # Logical pacing: the video clock stands at the question, t_a = t_q.
    assert result.answer_t == 30.5


def test_the_prediction_is_the_last_episode_after_dispatch() -> None:
    rec = question()
    log = asked(rec, "A", "B")
    log.finish()
    result = evaluate_qa(assemble_one("q1", log.rows()), rec, PAPER)
    assert (result.prediction, result.parsed, result.correct) == ("B", "B", True)
    assert result.ttft_s == pytest.approx(0.25)  # first token of the first episode
    assert result.latency_s == pytest.approx(1.0)  # completion of the prediction
    assert result.responses == 2


def test_wall_clock_origin_is_the_question_schedule() -> None:
    rec = question()
    log = SessionLog("run", "q1", pacing="wall_clock").start()
    base = 100 * S
    for t in range(20, 31):
        # Frame t is due at base + (t - 20) s and sent 50 ms late.
        due = base + (t - 20) * S
        log.frame(float(t), ns=due + S // 20, scheduled_ns=due)
    # The question (t_q = 30.5) was due at base + 10.5 s and went out 0.1 s late.
    log.question(rec, ns=base + 10_600_000_000)
    log.respond("B", onset_ns=base + 11 * S, onset_t=31.0, final_ns=base + 12 * S)
    log.finish()
    result = evaluate_qa(assemble_one("q1", log.rows()), rec, PAPER)
    assert result.ttft_s == pytest.approx(0.5)
    assert result.latency_s == pytest.approx(1.5)
    assert result.answer_t == 31.0  # the mapped onset under wall clock


def population() -> tuple[list[QARecord], list[SessionLog]]:
    records = [question(f"q{i}", answer="B", video=f"v{i}") for i in range(6)]
    logs = [
        asked(records[0], "The answer is B"),  # correct (recoverable only)
        asked(records[1], "C"),  # wrong
        asked(records[2], "It is probably the blue one"),  # invalid prose
        asked(records[3]),  # declined: a silent decision, no episode
        asked(records[4]),  # failed: no answer within the timeout
    ]
    logs[3].silent()
    for log in logs[:4]:
        log.finish()
    logs[4].fail("response", "no answer within 60s")
    return records, logs  # records[5] never ran


def test_failed_silent_and_unrun_records_stay_in_the_denominators() -> None:
    records, logs = population()
    scores = scores_of(evaluate_source(memory_source(records, logs), PAPER))
    qa = scores.overall["qa"]
    assert qa["accuracy"].value == pytest.approx(1 / 6)
    assert qa["accuracy"].population == 6
    assert qa["invalid_output_rate"].value == pytest.approx(4 / 6)
    assert qa["completion_rate"].value == pytest.approx(4 / 6)
    # Three records answered, all 0.25 s. TRACE observes TTFT over the queries that
    # produced a response or a decision: the three answered and the declined one (the
    # failed and the unrun records produced nothing).
    ttft = qa["ttft_s_p50"]
    assert (ttft.value, ttft.population, ttft.observed) == (pytest.approx(0.25), 4, 3)
    assert ttft.coverage == 0.75
    assert qa["latency_s_max"].value == pytest.approx(0.75)
    assert qa["latency_s_max"].ci95 is None
    assert scores.sessions.failed_infrastructure == 1
    # trace-extended observes them over every QA record.
    extended = scores_of(evaluate_source(memory_source(records, logs), EXTENDED))
    ttft = extended.overall["qa"]["ttft_s_p50"]
    assert (ttft.population, ttft.observed, ttft.coverage) == (6, 3, 0.5)


def test_the_strict_profile_rejects_introduced_answers() -> None:
    records, logs = population()
    scores = scores_of(evaluate_source(memory_source(records, logs), STRICT))
    assert scores.overall["qa"]["accuracy"].value == 0.0
    assert scores.overall["qa"]["invalid_output_rate"].value == pytest.approx(5 / 6)
    assert scores.profile.constants["option_parser"] == "strict"


def test_quantiles_over_records() -> None:
    records = [question(f"q{i}", video=f"v{i}") for i in range(4)]
    logs = []
    for i, rec in enumerate(records):
        log = SessionLog("run", rec.record_id).start()
        log.frame(30.0)
        sent = log.question(rec, ns=50 * S)
        log.respond("B", onset_ns=sent + (i + 1) * S, final_ns=sent + (i + 2) * S)
        log.finish()
        logs.append(log)
    qa = scores_of(evaluate_source(memory_source(records, logs), PAPER)).overall["qa"]
    # TTFTs 1, 2, 3, 4 s: numpy's linear quantiles.
    assert qa["ttft_s_p50"].value == pytest.approx(2.5)
    assert qa["ttft_s_p95"].value == pytest.approx(3.85)
    assert qa["ttft_s_max"].value == pytest.approx(4.0)
    low, high = qa["ttft_s_p50"].ci95
    assert 1.0 <= low <= 2.5 <= high <= 4.0


# --- workload ----------------------------------------------------------------------------------


def test_workload_counts_replays_and_drops() -> None:
    rec = question()
    log = SessionLog("run", "q1").start()
    for t in range(5):
        log.frame(float(26 + t))
    log.workload([log.frame_id(0)], input_tokens=100)
    log.workload([log.frame_id(1)], input_tokens=100)
    log.workload([log.frame_id(2)], input_tokens=100)
    log.workload([log.frame_id(0), log.frame_id(1), log.frame_id(2)], kind="replay")
    log.workload([log.frame_id(4)], kind="state_commit")  # folded into a native state
    log.workload([log.frame_id(3)], kind="drop")  # dropped: not a submission
    log.question(rec)
    log.respond("B", output_tokens=7)
    log.finish()
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert result.delivered_frames == 5
    assert result.submitted_images == 7
    assert result.unique_submitted_frames == 4
    assert result.replayed_occurrences == 3
    assert result.dropped_frames == 1
    assert (result.output_tokens, result.input_tokens, result.model_calls) == (7, 300, 3)


@pytest.mark.parametrize(("skipped", "dropped"), [(None, 0), (3, 1), (1, 1)])
def test_a_duplicated_frame_is_delivered_twice_but_never_a_drop(
    skipped: int | None, dropped: int
) -> None:
    """Frames 0..3, frames 1 and 2 sent twice (the `duplicate` perturbation); the adapter
    takes each copy it gets except those of frame `skipped`."""
    log = SessionLog("run", "q1").start()
    for index in range(4):
        copies = 2 if index in (1, 2) else 1
        for copy in range(copies):
            log.frame(float(26 + index), again=copy == 1)
            if index != skipped:
                log.workload([log.frame_id(index)])
    log.question(question())
    log.respond("B")
    log.finish()
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert result.delivered_frames == 6
    assert result.unique_submitted_frames == (4 if skipped is None else 3)
    assert result.replayed_occurrences == (1 if skipped == 1 else 2)
    assert result.dropped_frames == dropped


@pytest.mark.parametrize(
    ("shared", "expected"),
    [
        ((0, 2, 3, 0), (5, 9)),  # the first call has no previous one: left out
        ((0, 2, 9, 0), (6, 9)),  # a count above its call's images is capped at them
        ((0, 2, None, 0), (None, None)),  # a following call that did not say
        ((None, 2, 3, 0), (5, 9)),
    ],
)
def test_the_prefix_share_counts_the_calls_after_a_sessions_first(
    shared: tuple[int | None, ...], expected: tuple[int | None, int | None]
) -> None:
    log = SessionLog("run", "q1").start()
    for t in range(5):
        log.frame(float(26 + t))
    windows = [[0, 1], [0, 1, 2], [0, 1, 2, 3], [3, 4]]
    for window, count in zip(windows, shared, strict=True):
        log.workload([log.frame_id(i) for i in window], prefix_shared_images=count)
    log.question(question())
    log.respond("B")
    log.finish()
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert (result.prefix_shared_images, result.following_images) == expected


def test_evictions_are_counted_apart_from_drops_with_their_reprefill_tokens() -> None:
    rec = question()
    log = SessionLog("run", "q1").start()
    for t in range(6):
        log.frame(float(24 + t))
        log.workload([log.frame_id(t)], kind="state_commit", input_tokens=10)
    log.workload([log.frame_id(0), log.frame_id(1)], kind="evict", input_tokens=0)
    log.workload([log.frame_id(2)], kind="evict", input_tokens=25)  # a compacted re-prefill
    log.question(rec)
    log.respond("B", output_tokens=2)
    log.finish()
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    # Evicted frames were submitted first: they are neither dropped nor resubmissions.
    assert (result.unique_submitted_frames, result.dropped_frames) == (6, 0)
    assert (result.evicted_frames, result.reprefill_tokens) == (3, 25)
    assert result.input_tokens == 6 * 10 + 25
    scores = scores_of(evaluate_source(memory_source([rec], [log]), PAPER))
    workload = scores.overall["workload"]
    assert (workload["evicted_frames"].value, workload["reprefill_tokens"].value) == (3, 25)


def test_an_adapter_that_never_evicts_reports_zero_evictions() -> None:
    log = asked(question(), "B")
    log.finish()
    result = evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds)
    assert (result.evicted_frames, result.reprefill_tokens) == (0, 0)


def test_unreported_workload_is_missing_not_zero() -> None:
    rec = question()
    log = asked(rec, "B")
    log.finish()
    log_counts_only = asked(question("q2", video="v2"), "B")
    log_counts_only.workload(images=4)  # a count without frame ids
    log_counts_only.finish()
    trace = assemble_one("q1", log.rows())
    result = evaluate_workload(trace, PAPER.submission_kinds)
    assert result.submitted_images is None
    assert result.unique_submitted_frames is None
    assert result.dropped_frames is None
    assert result.input_tokens is None
    assert result.output_tokens == 1
    counted = evaluate_workload(assemble_one("q2", log_counts_only.rows()), PAPER.submission_kinds)
    assert (counted.submitted_images, counted.unique_submitted_frames) == (4, None)
    scores = scores_of(
        evaluate_source(
            memory_source([rec, question("q2", video="v2")], [log, log_counts_only]), PAPER
        )
    )
    workload = scores.overall["workload"]
    assert (workload["submitted_images"].value, workload["submitted_images"].coverage) == (4, 0.5)
    assert workload["delivered_frames"].value == 22
    assert workload["unique_submitted_frames"].value is None


def test_output_tokens_are_missing_when_any_answer_did_not_report_them() -> None:
    rec = question()
    log = SessionLog("run", "q1").start()
    log.frame(30.0)
    log.question(rec)
    log.respond("A", output_tokens=3)
    log.respond("B", output_tokens=None)
    log.finish()
    assert (
        evaluate_workload(assemble_one("q1", log.rows()), PAPER.submission_kinds).output_tokens
        is None
    )

"""Answer Readiness Score: EP and LP at, before and after the evidence bounds; ARS, Acc_e."""

from __future__ import annotations

import math

import pytest

from streameval.core.benchmark.records import EvidenceSpan, ProactiveRecord, QARecord, Trigger
from streameval.scorer.eventlog import SessionLog, asked_session, memory_source
from streameval.scorer.metrics.readiness import early_penalty, late_penalty
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import evaluate_source, scores_of

PROFILE = SCORING_PROFILES["readiness"]  # γ_e = 2, γ_l = 0.5, ε = 1e-6
TAU = 10.0


@pytest.mark.parametrize(
    ("t_a", "expected"),
    [
        (20.0, 1.0),  # at t_s: 2 * sigmoid(0)
        (25.0, 1.0),  # after t_s: capped at 1
        (15.0, 2 / (1 + math.e)),  # 5 s early: 2 * sigmoid(2 * -5 / 10)
        (0.0, 2 / (1 + math.e**4)),  # 20 s early: 2 * sigmoid(-4)
        (-1e6, 0.0),  # absurdly early: no overflow
    ],
)
def test_early_penalty(t_a: float, expected: float) -> None:
    assert early_penalty(t_a, 20.0, TAU, PROFILE) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("t_a", "expected"),
    [
        (30.0, 1.0),  # at t_e
        (25.0, 1.0),  # before t_e: capped at 1
        (35.0, 0.75),  # 5 s late: 1 - 0.5 * 5 / 10
        (50.0, 0.0),  # 20 s late: 1 - 1.0
        (90.0, 0.0),  # floored at 0
    ],
)
def test_late_penalty(t_a: float, expected: float) -> None:
    assert late_penalty(t_a, 30.0, TAU, PROFILE) == pytest.approx(expected, abs=1e-6)


def qa(record_id: str, spans: list[tuple[float, float]], t_q: float, answer: str = "A") -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="handwritten",
        task_type="EPM",
        video_path=f"{record_id}.mp4",
        question="?",
        options=("A. yes", "B. no"),
        answer=answer,
        question_time_s=t_q,
        evidence_anchor_s=spans[0][0],
        evidence_spans=tuple(EvidenceSpan(start_s=a, end_s=b) for a, b in spans),
    )


def answered(rec: QARecord, text: str | None) -> SessionLog:
    return asked_session(rec, text, [rec.question_time_s])


def test_qa_ars_and_effective_accuracy() -> None:
    records = [
        qa("r1", [(10, 14), (16, 20)], 20.0),  # window [10, 20], answered at t_q = 20: 1
        qa("r2", [(0, 10)], 15.0),  # 5 s after t_e: LP = 0.75
        qa("r3", [(30, 34)], 32.0, answer="B"),  # inside the window: 1, but wrong
        qa("r4", [(0, 10)], 12.0),  # declined: no answer time, not observed
    ]
    logs = [answered(records[0], "A"), answered(records[1], "A"), answered(records[2], "A")]
    logs.append(answered(records[3], None))
    scores = scores_of(evaluate_source(memory_source(records, logs), PROFILE))
    assert scores.derived["readiness_tau_s"] == {"qa": 10.0}  # durations 10, 10, 4, 10
    ready = scores.overall["readiness"]
    ars = (1.0 + 0.75 + 1.0) / 3
    assert ready["ars"].value == pytest.approx(ars, rel=1e-6)
    assert (ready["ars"].observed, ready["ars"].population) == (3, 4)
    assert ready["late_penalty"].value == pytest.approx(ars, rel=1e-6)
    assert ready["early_penalty"].value == 1.0
    assert ready["accuracy"].value == 0.5
    assert ready["acc_e"].value == pytest.approx(0.5 * ars, rel=1e-6)
    assert scores.records[1].readiness["turns"] == [{"t_s": 0.0, "t_e": 10.0, "t_a": 15.0}]


def test_proactive_turns_use_evidence_bounds_and_assigned_onsets() -> None:
    rec = ProactiveRecord(
        record_id="p1",
        source_id="p1",
        source_benchmark="handwritten",
        task_type="CRR",
        video_path="p1.mp4",
        instruction="Tell me when you know.",
        instruction_time_s=0.0,
        triggers=(
            Trigger(
                trigger_type="clue_sufficient",
                answer="rain",
                point_s=20.0,
                evidence_start_s=18.0,
                evidence_end_s=22.0,
            ),
            Trigger(trigger_type="event_onset", answer="sun", point_s=40.0),
        ),
    )
    log = SessionLog("run", "p1").start()
    for t in range(46):
        log.frame(float(t))
        if t == 0:
            log.instruction(rec)
        log.step()
        if t in (16, 43):
            log.respond("rain" if t == 16 else "sun")
        else:
            log.silent()
    log.finish()
    scores = scores_of(evaluate_source(memory_source([rec], [log]), PROFILE))
    # Durations 4 (evidence) and 5 (the window [40, 45)): τ = 4.5. The answer at 16 is
    # consumed before the window, 2 s before the evidence: EP = 2 * sigmoid(2 * -2 / 4.5).
    tau = 4.5
    ep = 2 / (1 + math.exp(4 / (tau + 1e-6)))
    assert scores.derived["readiness_tau_s"] == {"proactive": tau}
    ready = scores.overall["readiness"]
    assert ready["ars"].value == pytest.approx((ep + 1.0) / 2)
    assert ready["accuracy"].value == 0.5  # "rain" came before its window: scores 0
    assert ready["acc_e"].value == pytest.approx(0.5 * (ep + 1.0) / 2)


def test_questions_without_evidence_leave_the_population_with_a_note() -> None:
    with_spans = qa("r1", [(0, 10)], 15.0)  # 5 s after t_e, τ = 10: LP = 0.75
    # Anchored at the question time and without spans, like 15 of TRACE's 21 sample records.
    without = [qa(rid, [(12, 12)], 12.0).model_copy(update={"evidence_spans": ()}) for rid in "23"]
    records = [with_spans, *without]
    logs = [answered(record, "A") for record in records]
    scores = scores_of(evaluate_source(memory_source(records, logs), PROFILE))
    # Were the anchors t_s = t_e, τ would be median(10, 0, 0) = 0 and every answer after
    # the question would score LP = 0: the two questions without spans are left out.
    assert scores.derived["readiness_tau_s"] == {"qa": 10.0}
    ready = scores.overall["readiness"]
    assert (ready["ars"].value, ready["ars"].population) == (pytest.approx(0.75), 1)
    coverage = ready["evidence_coverage"]
    assert (coverage.value, coverage.population) == (pytest.approx(1 / 3), 3)
    assert ready["accuracy"].population == 1  # the same population as ARS
    by_id = {r.record_id: r.readiness for r in scores.records}
    assert by_id["2"] == {
        "applicable": False,
        "turns": [],
        "ars": None,
        "early_penalty": None,
        "late_penalty": None,
    }
    assert (
        "readiness: 2 of 3 QA records have no evidence window and are left out of the "
        "readiness population (see readiness.evidence_coverage)"
    ) in scores.notes


def test_a_population_of_point_evidence_is_not_applicable_never_zero() -> None:
    records = [qa("r1", [(10, 10)], 15.0), qa("r2", [(20, 20)], 25.0)]
    logs = [answered(record, "A") for record in records]
    scores = scores_of(evaluate_source(memory_source(records, logs), PROFILE))
    assert scores.derived["readiness_tau_s"] == {"qa": 0.0}
    ready = scores.overall["readiness"]
    for name in ("ars", "early_penalty", "late_penalty", "accuracy", "acc_e"):
        assert ready[name].value is None, name
    assert ready["evidence_coverage"].value == 0.0
    assert (
        "readiness is not applicable to the qa records: every evidence window is a point "
        "(τ = 0), so any answer after it would score 0"
    ) in scores.notes

"""StreamingBench's own scoring (the streamingbench profile) on hand-computed cases."""

from __future__ import annotations

import pytest

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, asked_session, memory_source
from streameval.scorer.metrics.streamingbench import (
    contains_output,
    evaluate_streamingbench,
    first_label,
)
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import evaluate_source, scores_of

SB = SCORING_PROFILES["streamingbench"]
SB_RUN = {"profile": "streamingbench-polling", "pacing": "logical"}
LABELS = ("A", "B", "C", "D")


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("B", "B"),
        ("(C) candy", "C"),
        ("Answer: D", "D"),  # "Answer" is a word, not the label A
        ("I think B", "B"),  # "I" is no option label here
        ("A cat is on the table", "A"),  # the lenient parse takes a standalone A
        ("B or C", "B"),  # the first one found
        ("<think>maybe A</think> C.", "C"),  # the normalisation drops the thinking
        ("E", None),  # not an option
        ("the blue one", None),
        ("Ab", None),
    ],
)
def test_the_first_standalone_option_label(text: str, label: str | None) -> None:
    assert first_label(text, LABELS) == label


@pytest.mark.parametrize(
    ("text", "expected", "hit"),
    [
        ("The score is now +3", "+3", True),
        ("WHITE   hit!", "White Hit", True),  # case and spacing normalised
        ("3", "+3", False),
        ("23 points scored", "23 points", True),
        ("it's 13", "3", True),  # contained: StreamingBench's leniency
        ("twenty-three points", "23 points", False),
    ],
)
def test_contains_the_expected_output_normalised(text: str, expected: str, hit: bool) -> None:
    assert contains_output(text, expected) is hit


def proactive(*targets: tuple[float, str], record_id: str = "p1") -> ProactiveRecord:
    return ProactiveRecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="streamingbench",
        task_type="Proactive Output",
        video_path=f"{record_id}.mp4",
        instruction='When the white ball is hit, output "White Hit".',
        instruction_time_s=10.0,
        triggers=tuple(
            Trigger(trigger_type="event_onset", answer=answer, point_s=t) for t, answer in targets
        ),
    )


def polled(record: ProactiveRecord, answers: dict[float, str], until: float = 25.0):
    """A frame and a poll every second from the instruction on; `answers` maps an onset
    time (a poll's time) to what was said there."""
    log = SessionLog("run", record.record_id).start(protocol="streamingbench-polling")
    t = record.instruction_time_s
    log.frame(t)
    log.instruction(record)
    while t <= until:
        if t > record.instruction_time_s:
            log.frame(t)
        log.step()
        if t in answers:
            log.respond(answers[t])
        else:
            log.silent()
        t += 1.0
    log.finish()
    return log


def hits(record: ProactiveRecord, answers: dict[float, str]) -> list[bool]:
    trace = assemble_one(record.record_id, polled(record, answers).rows())
    return [target.hit for target in evaluate_streamingbench(trace, record, SB).targets]


WHITE = proactive((17.0, "White Hit"))


@pytest.mark.parametrize(
    ("onset", "hit"),
    [(15.0, True), (17.0, True), (19.0, True), (14.0, False), (20.0, False)],
)
def test_a_hit_lies_within_two_seconds_inclusive(onset: float, hit: bool) -> None:
    assert hits(WHITE, {onset: "White hit!"}) == [hit]


def hit_at(target_t: float, onset_t: float) -> bool:
    record = proactive((target_t, "White Hit"))
    log = SessionLog("run", "p1").start()
    log.frame(10.0)
    log.instruction(record)
    log.frame(onset_t)
    log.step()
    log.respond("White Hit")
    log.finish()
    (target,) = evaluate_streamingbench(assemble_one("p1", log.rows()), record, SB).targets
    return target.hit


def test_the_two_second_boundary_survives_binary_fractions() -> None:
    # 17.1 - 15.1 is 2.0000000000000018 in binary floating point; it is still 2 s.
    assert 17.1 - 15.1 > 2.0
    assert hit_at(17.1, 15.1) is True
    assert hit_at(17.1, 15.09) is False  # 2.01 s early
    assert hit_at(17.1, 19.11) is False  # 2.01 s late


def test_only_the_first_answer_counts_and_silence_is_no_answer() -> None:
    # StreamingBench stops at its first answer: a wrong early one loses the target.
    assert hits(WHITE, {12.0: "Nothing yet", 17.0: "White Hit"}) == [False]
    # The right text at the wrong time is no hit either.
    assert hits(WHITE, {12.0: "White Hit"}) == [False]
    # A silence token is no answer: the next one is the first.
    assert hits(WHITE, {12.0: "Silent.", 16.0: "White Hit"}) == [True]
    assert hits(WHITE, {}) == [False]


def test_several_targets_take_the_answers_in_order() -> None:
    record = proactive((14.0, "one"), (20.0, "two"))
    assert hits(record, {13.0: "one", 21.0: "two"}) == [True, True]
    # The only answer goes to the first target (6 s late); the second has none.
    assert hits(record, {20.0: "two"}) == [False, False]


def qa(record_id: str, answer: str) -> QARecord:
    return QARecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="streamingbench",
        task_type="Attribute Recognition",
        video_path=f"{record_id}.mp4",
        question="What colour?",
        options=("A. red", "B. blue", "C. green", "D. pink"),
        answer=answer,
        question_time_s=3.0,
        evidence_anchor_s=3.0,
    )


def asked(record: QARecord, answer: str | None) -> SessionLog:
    return asked_session(record, answer, range(4), protocol="streamingbench-polling")


def test_run_accuracy_pools_questions_and_targets() -> None:
    records = [qa("q1", "B"), qa("q2", "C"), qa("q3", "A"), qa("q4", "D"), WHITE]
    logs = [
        asked(records[0], "I think B"),  # B: right
        asked(records[1], "Answer: A, not C"),  # A first: wrong
        asked(records[2], None),  # declined: wrong
        asked(records[3], "(D)"),  # right
        polled(WHITE, {16.0: "white hit"}),  # hit
    ]
    scores = scores_of(evaluate_source(memory_source(records, logs, config=SB_RUN), SB))
    sb = scores.overall["streamingbench"]
    assert sb["qa_accuracy"].value == pytest.approx(50.0)
    assert sb["proactive_accuracy"].value == pytest.approx(100.0)
    assert sb["accuracy"].value == pytest.approx(60.0)  # 3 of 5
    assert (sb["accuracy"].population, sb["proactive_accuracy"].population) == (5, 1)
    assert sb["completion_rate"].value == 1.0
    assert set(scores.overall) == {"streamingbench", "workload"}
    by_id = {record.record_id: record for record in scores.records}
    assert (by_id["q2"].streamingbench["parsed"], by_id["q2"].streamingbench["correct"]) == (
        "A",
        False,
    )
    target = by_id["p1"].streamingbench["targets"][0]
    assert (target["onset_t"], target["response"], target["hit"]) == (16.0, "white hit", True)
    # Nothing is judged, so no judge note; the run's protocol is the one this profile reads.
    assert (scores.protocol, scores.notes, scores.judge.requests) == (
        "streamingbench-polling",
        [],
        0,
    )

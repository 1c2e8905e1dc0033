"""StreamingBench's scoring on hand-computed cases: its own rules (the `streamingbench`
profile, StreamingBench's count.py) and this project's (`streamingbench-extended`)."""

from __future__ import annotations

import pytest

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, asked_session, memory_source
from streameval.scorer.metrics.streamingbench import (
    contains_output,
    evaluate_streamingbench,
    first_character,
    first_label,
)
from streameval.scorer.profiles import SCORING_PROFILES, ProfileError
from streameval.scorer.report import evaluate_source, scores_of

SB = SCORING_PROFILES["streamingbench"]
EXTENDED = SCORING_PROFILES["streamingbench-extended"]
SB_RUN = {"profile": "streamingbench-polling", "pacing": "logical"}
LABELS = ("A", "B", "C", "D")


@pytest.mark.parametrize(
    ("text", "read"),
    [
        ("B", "B"),
        ("B. blue", "B"),
        ("Answer: D", "A"),  # StreamingBench reads the A of "Answer"
        ("Option B", "O"),
        ("(B)", "("),
        ("**B**", "*"),
        (" B", " "),  # nothing is stripped
        ("b", "b"),  # nor upper-cased
        ("<think>A</think>C", "<"),
        ("", ""),
    ],
)
def test_streamingbench_reads_the_first_character(text: str, read: str) -> None:
    assert first_character(text) == read


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
    ("text", "expected", "published", "extended"),
    [
        ("The score is now +3", "+3", True, True),
        ("WHITE   hit!", "White Hit", False, True),  # case and spacing: extended only
        ("white hit", "White Hit", False, True),
        ("White Hit!", "White Hit", True, True),
        ("3", "+3", False, False),
        ("23 points scored", "23 points", True, True),
        ("it's 13", "3", True, True),  # contained: StreamingBench's leniency
        ("<think>no</think> 40  points", "40 points", False, True),
        ("twenty-three points", "23 points", False, False),
    ],
)
def test_contains_the_expected_output(
    text: str, expected: str, published: bool, extended: bool
) -> None:
    assert contains_output(text, expected, SB.sb_rules) is published
    assert contains_output(text, expected, EXTENDED.sb_rules) is extended


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


def hits(record: ProactiveRecord, answers: dict[float, str], profile=SB) -> list[bool]:
    trace = assemble_one(record.record_id, polled(record, answers).rows())
    return [target.hit for target in evaluate_streamingbench(trace, record, profile).targets]


WHITE = proactive((17.0, "White Hit"))


@pytest.mark.parametrize(
    ("onset", "hit"),
    [(15.0, True), (17.0, True), (19.0, True), (14.0, False), (20.0, False)],
)
def test_a_hit_lies_within_two_seconds_inclusive(onset: float, hit: bool) -> None:
    assert hits(WHITE, {onset: "White Hit!"}) == [hit]
    assert hits(WHITE, {onset: "White hit!"}) == [False]  # case-sensitive
    assert hits(WHITE, {onset: "White hit!"}, EXTENDED) == [hit]


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


ANSWERS = [  # (gold, what was said; None: declined)
    ("B", "I think B"),  # StreamingBench reads "I"; extended, B
    ("C", "Answer: A, not C"),  # "A" either way
    ("A", None),  # declined: left out by StreamingBench, wrong for extended
    ("D", "(D)"),  # "(" for StreamingBench; D for extended
    ("B", "B"),
    ("A", "Answer: D"),  # StreamingBench reads the A of "Answer": right; extended, D
    ("C", ""),  # empty: left out by StreamingBench, wrong for extended
]


def mixed_run():
    records = [qa(f"q{i}", gold) for i, (gold, _said) in enumerate(ANSWERS)]
    logs = [asked(record, said) for record, (_gold, said) in zip(records, ANSWERS, strict=True)]
    return memory_source(
        [*records, WHITE], [*logs, polled(WHITE, {16.0: "white hit"})], config=SB_RUN
    )


def test_streamingbench_counts_as_its_count_py_does() -> None:
    scores = scores_of(evaluate_source(mixed_run(), SB))
    sb = scores.overall["streamingbench"]
    assert (sb["qa_accuracy"].value, sb["qa_accuracy"].population) == (pytest.approx(40.0), 5)
    # On time, but "white hit" does not contain "White Hit".
    assert sb["proactive_accuracy"].value == 0.0
    assert sb["proactive_time_accuracy"].value == 100.0
    assert (sb["accuracy"].value, sb["accuracy"].population) == (pytest.approx(100 / 3), 6)
    assert (sb["excluded_answers"].value, sb["excluded_answers"].population) == (2.0, 7)
    assert sb["completion_rate"].value == 1.0
    assert set(scores.overall) == {"streamingbench", "workload"}
    by_id = {record.record_id: record.streamingbench for record in scores.records}
    assert [(by_id[f"q{i}"]["parsed"], by_id[f"q{i}"]["correct"]) for i in range(7)] == [
        ("I", False),
        ("A", False),
        (None, False),
        ("(", False),
        ("B", True),
        ("A", True),
        (None, False),
    ]
    assert [by_id[f"q{i}"]["excluded"] for i in range(7)] == [False, False, True] + [False] * 3 + [
        True
    ]
    target = by_id["p1"]["targets"][0]
    assert (target["onset_t"], target["on_time"], target["hit"]) == (16.0, True, False)
    # Nothing is judged, so no judge note; the exclusion is stated, with its count.
    assert scores.notes == [
        "streamingbench: 2 of 7 questions got an empty answer or none and are left out of the "
        "accuracy denominators (streamingbench.excluded_answers), as StreamingBench's count.py "
        "skips them in its sqa part; its real and omni parts stop with an error on them instead"
    ]
    assert (scores.protocol, scores.judge.requests) == ("streamingbench-polling", 0)


def test_streamingbench_extended_reads_labels_and_counts_empty_answers_wrong() -> None:
    scores = scores_of(evaluate_source(mixed_run(), EXTENDED))
    sb = scores.overall["streamingbench"]
    assert (sb["qa_accuracy"].value, sb["qa_accuracy"].population) == (pytest.approx(300 / 7), 7)
    assert sb["proactive_accuracy"].value == 100.0
    assert (sb["accuracy"].value, sb["accuracy"].population) == (50.0, 8)
    assert "excluded_answers" not in sb
    by_id = {record.record_id: record.streamingbench for record in scores.records}
    assert [by_id[f"q{i}"]["parsed"] for i in range(7)] == ["B", "A", None, "D", "B", "D", None]
    assert scores.notes == []


def test_a_task_type_whose_answers_are_all_empty_has_no_accuracy() -> None:
    """count.py writes no row for it (its accuracy would divide by 0)."""
    record = qa("q0", "A")
    scores = scores_of(
        evaluate_source(memory_source([record], [asked(record, "")], config=SB_RUN), SB)
    )
    sb = scores.by_task_type["Attribute Recognition"]["streamingbench"]
    assert (sb["qa_accuracy"].value, sb["qa_accuracy"].population) == (None, 0)
    assert sb["excluded_answers"].value == 1.0


def test_an_unknown_rule_set_is_refused_by_name() -> None:
    with pytest.raises(ProfileError, match="sb_rules must be one of streamingbench, extended"):
        SB.with_overrides(sb_rules="lenient")

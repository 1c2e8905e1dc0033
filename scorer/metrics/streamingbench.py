"""StreamingBench's scoring of one record, under two rule sets (the profile's `sb_rules`).

`streamingbench` (`sb_rules = "streamingbench"`) follows StreamingBench's published scorer
(`src/data/count.py`), quirks included:
- Multiple choice: the response's first character, raw, equals the gold letter ("Answer: D"
  reads as A, "Option B" and " B" are wrong, "B. blue" is right). A question whose answer is
  empty, or that got none (declined, or cut off), is left out of the denominator and counted
  as excluded: count.py skips it in the sqa part and stops with an error on it in the real
  and omni parts, and a reported exclusion stands in for that crash.
- Proactive output: a target is on time when the answer's onset lies within
  ±`sb_hit_tolerance_s` (2 s, inclusive) of the ground-truth time, and a hit when it is on
  time and the expected output occurs in the raw answer, case and spaces as they are
  ("3" is in "13"; "White Hit" is not in "white hit").
`streamingbench-extended` (`sb_rules = "extended"`) keeps this project's readings: the first
standalone option label of the normalised, case-kept response ("Answer: D" gives D), the
expected output in the normalised answer, and an empty or missing answer counted wrong.

Proactive output under both: StreamingBench polls every second until the model first says
it is time, then keeps that one answer. The polling protocol here keeps polling, so the first
answered episode (an empty text or a silence token is the poll's "no") is the answer; targets
(triggers, in time order) take the answered episodes in onset order, one each (a
StreamingBench record has one target).

The family (`STREAMINGBENCH`) reports, in percent, the pooled accuracy over counted questions
and targets, the QA accuracy, the proactive answer and time accuracies, with the completion
rate and (under `streamingbench`) the number of excluded questions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.scorer.episodes import SessionTrace, timed_answers
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation
from streameval.scorer.metrics.qa import predicted
from streameval.scorer.metrics.statistic import Ratio, Statistic, Sum
from streameval.scorer.parsing import clean, gold_label, normalise_extended, option_labels
from streameval.scorer.profiles import ScoringProfile

_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])")
# Binary fractions: 17.1 - 15.1 is 2.0000000000000018; a boundary must not move with them.
_SLACK_S = 1e-9
PUBLISHED = "streamingbench"  # the `sb_rules` value of StreamingBench's own scorer


def first_label(text: str, labels: tuple[str, ...]) -> str | None:
    """The first standalone capital in `text` that is one of the option labels (extended)."""
    for match in _STANDALONE.finditer(clean(text)):
        if match.group(1) in labels:
            return match.group(1)
    return None


def first_character(text: str) -> str:
    """What StreamingBench compares with the gold letter: the raw response's first character."""
    return text[:1]


def contains_output(text: str, expected: str, rules: str) -> bool:
    """The expected output in the answer: raw and case-sensitive (StreamingBench's), or both
    normalised (extended)."""
    if rules == PUBLISHED:
        return expected in text
    return normalise_extended(expected) in normalise_extended(text)


@dataclass(frozen=True, slots=True)
class SbTarget:
    t: float
    expected: str
    response: str | None
    onset_t: float | None
    on_time: bool
    hit: bool


@dataclass(frozen=True, slots=True)
class SbResult:
    parsed: str | None = None  # QA: the label (extended) or first character (published) read
    correct: bool = False  # QA
    excluded: bool = False  # QA: left out of the denominator (empty or missing answer)
    targets: tuple[SbTarget, ...] = ()  # proactive

    @property
    def hits(self) -> int:
        return sum(target.hit for target in self.targets)

    @property
    def on_time(self) -> int:
        return sum(target.on_time for target in self.targets)


def evaluate_qa(trace: SessionTrace, record: QARecord, rules: str) -> SbResult:
    _, answer = predicted(trace)
    text = None if answer is None else answer.text
    if rules == PUBLISHED:
        if not text:
            return SbResult(excluded=True)
        parsed = first_character(text)
        return SbResult(parsed=parsed, correct=parsed == record.answer)
    parsed = None if text is None else first_label(text, option_labels(record.options))
    return SbResult(
        parsed=parsed, correct=parsed is not None and parsed == gold_label(record.answer)
    )


def evaluate_targets(
    trace: SessionTrace, record: ProactiveRecord, profile: ScoringProfile
) -> tuple[SbTarget, ...]:
    answered = sorted(timed_answers(trace, profile), key=lambda episode: episode.onset_t)
    targets = []
    for position, trigger in enumerate(sorted(record.triggers, key=lambda trig: trig.start_s)):
        t = trigger.start_s
        episode = answered[position] if position < len(answered) else None
        on_time = (
            episode is not None
            and abs(episode.onset_t - t) <= profile.sb_hit_tolerance_s + _SLACK_S
        )
        hit = on_time and contains_output(episode.text, trigger.answer, profile.sb_rules)
        targets.append(
            SbTarget(
                t=t,
                expected=trigger.answer,
                response=None if episode is None else episode.text,
                onset_t=None if episode is None else episode.onset_t,
                on_time=on_time,
                hit=hit,
            )
        )
    return tuple(targets)


def evaluate_streamingbench(
    trace: SessionTrace, record: QARecord | ProactiveRecord, profile: ScoringProfile
) -> SbResult:
    if isinstance(record, QARecord):
        return evaluate_qa(trace, record, profile.sb_rules)
    return SbResult(targets=evaluate_targets(trace, record, profile))


class StreamingbenchFamily(MetricFamily[SbResult]):
    name = "streamingbench"
    member = "sb_n"
    constants = ("sb_rules", "sb_hit_tolerance_s", "normalisation", "silence_tokens")
    headline = "accuracy"

    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> SbResult:
        return evaluate_streamingbench(evaluation.trace, evaluation.record, profile)

    def fields(
        self, result: SbResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        """A QA record is one question (none when excluded); a proactive record, one item
        per target."""
        common = {"sb_n": 1.0, "sb_finished": float(evaluation.status == "finished")}
        if isinstance(evaluation.record, QARecord):
            counted, correct = float(not result.excluded), float(result.correct)
            return common | {
                "sb_questions": 1.0,
                "sb_excluded": float(result.excluded),
                "sb_qa_n": counted,
                "sb_qa_correct": correct,
                "sb_items": counted,
                "sb_correct": correct,
            }
        targets, hits = float(len(result.targets)), float(result.hits)
        return common | {
            "sb_targets": targets,
            "sb_on_time": float(result.on_time),
            "sb_hits": hits,
            "sb_items": targets,
            "sb_correct": hits,
        }

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        statistics: dict[str, Statistic] = {
            "accuracy": Ratio("sb_correct", "sb_items", "questions and targets", scale=100.0),
            "qa_accuracy": Ratio("sb_qa_correct", "sb_qa_n", "questions", scale=100.0),
            "proactive_accuracy": Ratio("sb_hits", "sb_targets", "targets", scale=100.0),
            "proactive_time_accuracy": Ratio("sb_on_time", "sb_targets", "targets", scale=100.0),
            "completion_rate": Ratio("sb_finished", "sb_n", "records"),
        }
        if profile.sb_rules == PUBLISHED:
            statistics["excluded_answers"] = Sum("sb_excluded", "sb_questions", "questions")
        return statistics

    def details(
        self, result: SbResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        return asdict(result) | {"hits": result.hits}


STREAMINGBENCH = StreamingbenchFamily()


def exclusion_note(evaluations: Sequence[RecordEvaluation]) -> list[str]:
    """The results' note on questions left out as StreamingBench's scorer leaves them out."""
    questions = [
        result
        for evaluation in evaluations
        if isinstance(evaluation.record, QARecord)
        and (result := evaluation.results.get(STREAMINGBENCH.name)) is not None
    ]
    excluded = sum(result.excluded for result in questions)
    if not excluded:
        return []
    return [
        f"streamingbench: {excluded} of {len(questions)} questions got an empty answer or none "
        "and are left out of the accuracy denominators (streamingbench.excluded_answers), as "
        "StreamingBench's count.py skips them in its sqa part; its real and omni parts stop "
        "with an error on them instead"
    ]

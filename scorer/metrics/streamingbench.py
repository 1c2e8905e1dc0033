"""StreamingBench's own scoring of one record.

QA: multiple choice with a lenient parse, this project's reading of StreamingBench's: the
first option label that stands alone in the (normalised, case-kept) response, a capital
letter with no letter or digit touching it: "B", "(B) candy", "Answer: B", "I think B" all
give B ("I" is no option label); "A cat" gives A. Correct when it is the gold label.

Proactive output: StreamingBench polls every second until the model first says it is time,
then keeps that one answer. The polling protocol here keeps polling, so the first answered
episode is the answer, as StreamingBench's would be; targets (triggers, in time order) take
the answered episodes in onset order, one each (a StreamingBench record has one target). A
target is a hit when its episode's onset lies within ±`sb_hit_tolerance_s` (2 s, inclusive)
of the target time (the trigger's point, or a state interval's start) and the normalised
expected output occurs in the normalised answer ("+3" in "the score is now +3").

The family (`STREAMINGBENCH`) reports, in percent, the pooled accuracy over questions and
targets, the QA and the proactive accuracy, with the completion rate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.scorer.episodes import SessionTrace, timed_answers
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation
from streameval.scorer.metrics.qa import predicted
from streameval.scorer.metrics.statistic import Ratio, Statistic
from streameval.scorer.parsing import clean, gold_label, normalise_extended, option_labels
from streameval.scorer.profiles import ScoringProfile

_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([A-Z])(?![A-Za-z0-9])")
# Binary fractions: 17.1 - 15.1 is 2.0000000000000018; a boundary must not move with them.
_SLACK_S = 1e-9


def first_label(text: str, labels: tuple[str, ...]) -> str | None:
    """The first standalone capital in `text` that is one of the option labels."""
    for match in _STANDALONE.finditer(clean(text)):
        if match.group(1) in labels:
            return match.group(1)
    return None


def contains_output(text: str, expected: str) -> bool:
    return normalise_extended(expected) in normalise_extended(text)


@dataclass(frozen=True, slots=True)
class SbTarget:
    t: float
    expected: str
    response: str | None
    onset_t: float | None
    hit: bool


@dataclass(frozen=True, slots=True)
class SbResult:
    parsed: str | None = None  # QA: the label recovered
    correct: bool = False  # QA
    targets: tuple[SbTarget, ...] = ()  # proactive

    @property
    def hits(self) -> int:
        return sum(target.hit for target in self.targets)


def evaluate_streamingbench(
    trace: SessionTrace, record: QARecord | ProactiveRecord, profile: ScoringProfile
) -> SbResult:
    if isinstance(record, QARecord):
        _, answer = predicted(trace)
        labels = option_labels(record.options)
        parsed = None if answer is None else first_label(answer.text, labels)
        correct = parsed is not None and parsed == gold_label(record.answer)
        return SbResult(parsed=parsed, correct=correct)
    answered = sorted(timed_answers(trace, profile), key=lambda episode: episode.onset_t)
    targets = []
    for position, trigger in enumerate(sorted(record.triggers, key=lambda trig: trig.start_s)):
        t = trigger.start_s
        episode = answered[position] if position < len(answered) else None
        hit = (
            episode is not None
            and abs(episode.onset_t - t) <= profile.sb_hit_tolerance_s + _SLACK_S
            and contains_output(episode.text, trigger.answer)
        )
        targets.append(
            SbTarget(
                t=t,
                expected=trigger.answer,
                response=None if episode is None else episode.text,
                onset_t=None if episode is None else episode.onset_t,
                hit=hit,
            )
        )
    return SbResult(targets=tuple(targets))


class StreamingbenchFamily(MetricFamily[SbResult]):
    name = "streamingbench"
    member = "sb_n"
    constants = ("sb_hit_tolerance_s", "normalisation", "silence_tokens")
    headline = "accuracy"

    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> SbResult:
        return evaluate_streamingbench(evaluation.trace, evaluation.record, profile)

    def fields(
        self, result: SbResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        """A QA record is one question; a proactive record, one item per target."""
        common = {"sb_n": 1.0, "sb_finished": float(evaluation.status == "finished")}
        if isinstance(evaluation.record, QARecord):
            correct = float(result.correct)
            return common | {
                "sb_qa_n": 1.0,
                "sb_qa_correct": correct,
                "sb_items": 1.0,
                "sb_correct": correct,
            }
        targets, hits = float(len(result.targets)), float(result.hits)
        return common | {
            "sb_targets": targets,
            "sb_hits": hits,
            "sb_items": targets,
            "sb_correct": hits,
        }

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        return {
            "accuracy": Ratio("sb_correct", "sb_items", "questions and targets", scale=100.0),
            "qa_accuracy": Ratio("sb_qa_correct", "sb_qa_n", "questions", scale=100.0),
            "proactive_accuracy": Ratio("sb_hits", "sb_targets", "targets", scale=100.0),
            "completion_rate": Ratio("sb_finished", "sb_n", "records"),
        }

    def details(
        self, result: SbResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        return asdict(result) | {"hits": result.hits}


STREAMINGBENCH = StreamingbenchFamily()

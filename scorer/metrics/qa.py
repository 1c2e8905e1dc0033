"""TRACE QA metrics of one record (metrics spec section 2).

The prediction is the last response episode of the record's own task (probe answers never
count) that began after the question was dispatched; an episode cut off by a failure (never
closed) is no prediction. The runtime origin is the
question's arrival: the `question_sent` runtime under logical pacing, the question's
scheduled runtime under wall-clock pacing (so Core lag counts against the system, as in the
spec). TTFT runs to the first token of the first episode after dispatch, latency to the
completion of the prediction. TRACE observes both over the queries that produced a response
or a decision (the profile's `latency_population`).

The family (`QA`) reports accuracy, completion and invalid outputs over every QA record, and
TTFT and latency quantiles over the timed ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from streameval.core.benchmark.records import QARecord
from streameval.scorer.episodes import Episode, SessionTrace, prediction
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation, number
from streameval.scorer.metrics.statistic import Quantile, Ratio, Statistic
from streameval.scorer.parsing import OPTION_PARSERS, gold_label, option_labels
from streameval.scorer.profiles import ScoringProfile


@dataclass(frozen=True, slots=True)
class QAResult:
    gold: str
    prediction: str | None  # text of the prediction episode
    parsed: str | None  # the option label recovered by the profile's parser
    correct: bool
    invalid: bool  # no legal option recovered (failed and silent records included)
    ttft_s: float | None
    latency_s: float | None
    answer_t: float | None  # video time of the answer (readiness t_a)
    responses: int  # episodes after dispatch
    responded: bool  # a response or a silent decision came after dispatch


def evaluate_qa(trace: SessionTrace, record: QARecord, profile: ScoringProfile) -> QAResult:
    gold = gold_label(record.answer)
    after, prediction = predicted(trace)
    answered = prediction is not None and profile.is_answer(prediction.text)
    parsed = None
    if answered:
        parse = OPTION_PARSERS[profile.option_parser]
        parsed = parse(prediction.text, option_labels(record.options))
    origin = _origin_ns(trace)
    ttft = latency = None
    if origin is not None and after:
        ttft = (after[0].onset_ns - origin) / 1e9
        if prediction is not None and prediction.final_ns is not None:
            latency = (prediction.final_ns - origin) / 1e9
    return QAResult(
        gold=gold,
        prediction=None if prediction is None else prediction.text,
        parsed=parsed,
        correct=parsed is not None and parsed == gold,
        invalid=parsed is None,
        ttft_s=ttft,
        latency_s=latency,
        answer_t=_answer_t(trace, prediction) if answered else None,
        responses=len(after),
        responded=bool(after) or _declined(trace),
    )


def predicted(trace: SessionTrace) -> tuple[list[Episode], Episode | None]:
    """(own-task episodes after the question was dispatched, the prediction)."""
    return prediction(trace.own_episodes, trace.task_ns)


def _declined(trace: SessionTrace) -> bool:
    """A silent decision after the question: in a QA session it can only answer it."""
    return trace.task_ns is not None and any(ns >= trace.task_ns for ns in trace.silent_ns)


def _origin_ns(trace: SessionTrace) -> int | None:
    if trace.task_ns is None:
        return None
    if trace.wall_clock and trace.task_t is not None:
        scheduled = trace.scheduled_ns(trace.task_t)
        if scheduled is not None:
            return scheduled
    return trace.task_ns


def _answer_t(trace: SessionTrace, prediction: Episode) -> float | None:
    """Under logical pacing the video clock stands still at the question: t_a = t_q."""
    if trace.wall_clock:
        return prediction.onset_t
    return trace.task_t


# The timed metrics (on the Core's runtime clock) and the field each is a quantile of.
_TIMED = {"ttft_s": "qa_ttft", "latency_s": "qa_latency"}
_QUANTILES = {"p50": 0.5, "p95": 0.95, "max": 1.0}


class QAFamily(MetricFamily[QAResult]):
    name = "qa"
    member = "qa_n"
    constants = ("option_parser", "normalisation", "silence_tokens", "latency_population")
    always_evaluated = True  # a QA record's prediction and parse are shown under any profile
    headline = "accuracy"
    timing = frozenset(f"{stem}_{q}" for stem in _TIMED for q in _QUANTILES)

    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> QAResult | None:
        record = evaluation.record
        if not isinstance(record, QARecord):
            return None
        return evaluate_qa(evaluation.trace, record, profile)

    def fields(
        self, result: QAResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        # NaN: not in the TTFT/latency population.
        timed = profile.latency_population == "records" or result.responded
        return {
            "qa_n": 1.0,
            "qa_correct": float(result.correct),
            "qa_finished": float(evaluation.status == "finished"),
            "qa_invalid": float(result.invalid),
            "qa_ttft": number(result.ttft_s),
            "qa_latency": number(result.latency_s),
            "qa_timed_n": 1.0 if timed else math.nan,
        }

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        statistics: dict[str, Statistic] = {
            "accuracy": Ratio("qa_correct", "qa_n", "records"),
            "completion_rate": Ratio("qa_finished", "qa_n", "records"),
            "invalid_output_rate": Ratio("qa_invalid", "qa_n", "records"),
        }
        for stem, field in _TIMED.items():
            for name, q in _QUANTILES.items():
                # The bootstrap of a maximum says nothing: no interval for it.
                statistics[f"{stem}_{name}"] = Quantile(
                    field, q, "qa_timed_n", "records", interval=q < 1.0
                )
        return statistics


QA = QAFamily()

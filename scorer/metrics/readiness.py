"""Answer Readiness Score (seed 000, Eq. 9-11; metrics spec section 5).

For a question with evidence window [t_s, t_e] answered at t_a, and τ the median evidence
duration of the scored population:

    EP = min(1, 2 * sigmoid(γ_e * (t_a - t_s) / (τ + ε)))   1 from t_s on, falling before it
    LP = min(1, max(0, 1 - γ_l * (t_a - t_e) / (τ + ε)))    1 until t_e, then a linear decay
    ARS = mean over questions of EP * LP (a multi-answer question: mean over its turns)
    Acc_e = Acc * ARS

The paper writes "softmin"/"softmax" without a temperature and states EP reaches 1 at t_s
and LP stays 1 until t_e; the hard min/max are what make both statements true.

Only questions with an evidence window are scored: a question without one has no t_s, t_e.
A population whose evidence windows are all points (τ = 0) makes LP a step to 0 right after
t_e: its readiness is not applicable, never 0.

The family (`READINESS`) reads its turns from the qa and proactive results; τ is fixed per
task once the whole run is judged (`settle`). It reports the evidence coverage over every
record, and EP, LP, ARS, the accuracy and Acc_e over the readiness population.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from streameval.core.benchmark.records import QARecord
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation, number
from streameval.scorer.metrics.proactive import (
    BEFORE_WINDOW,
    IN_WINDOW,
    PROACTIVE,
    ProactiveResult,
)
from streameval.scorer.metrics.qa import QA
from streameval.scorer.metrics.statistic import Combined, Mean, Ratio, Statistic
from streameval.scorer.profiles import ScoringProfile


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    exp = math.exp(x)  # no overflow for very early answers
    return exp / (1.0 + exp)


def early_penalty(t_a: float, t_s: float, tau: float, profile: ScoringProfile) -> float:
    return min(1.0, 2.0 * _sigmoid(profile.ars_gamma_e * (t_a - t_s) / (tau + profile.ars_epsilon)))


def late_penalty(t_a: float, t_e: float, tau: float, profile: ScoringProfile) -> float:
    decay = profile.ars_gamma_l * (t_a - t_e) / (tau + profile.ars_epsilon)
    return min(1.0, max(0.0, 1.0 - decay))


@dataclass(frozen=True, slots=True)
class Turn:
    t_s: float
    t_e: float
    t_a: float | None  # None: never answered (the turn is not observed)


@dataclass(frozen=True, slots=True)
class Readiness:
    ars: float
    ep: float
    lp: float
    turns: int  # answered turns the means run over


def qa_turn(record: QARecord, answer_t: float | None) -> Turn | None:
    """Evidence window [min span start, max span end]; None for a question without
    evidence spans: it has no evidence window, so no readiness."""
    spans = record.evidence_spans
    if not spans:
        return None
    t_s = min(span.start_s for span in spans)
    t_e = max(span.end_s for span in spans)
    return Turn(t_s, t_e, answer_t)


def proactive_turns(result: ProactiveResult) -> list[Turn]:
    """One turn per target: its annotated evidence bounds, else its response window; t_a is
    the onset of the episode assigned to it (in or before the window)."""
    turns = []
    for outcome in result.windows:
        window = outcome.window
        t_s, t_e = window.evidence or (window.start, window.end)
        t_a = None
        if outcome.assignment in (IN_WINDOW, BEFORE_WINDOW) and outcome.episode is not None:
            t_a = result.answered[outcome.episode].onset_t
        turns.append(Turn(t_s, t_e, t_a))
    return turns


def median_duration(turns: Sequence[Turn]) -> float:
    """τ: median evidence duration t_e - t_s over every turn of the population."""
    return statistics.median(turn.t_e - turn.t_s for turn in turns) if turns else 0.0


def readiness(turns: Sequence[Turn], tau: float, profile: ScoringProfile) -> Readiness | None:
    answered = [turn for turn in turns if turn.t_a is not None]
    if not answered:
        return None
    eps = [early_penalty(turn.t_a, turn.t_s, tau, profile) for turn in answered]
    lps = [late_penalty(turn.t_a, turn.t_e, tau, profile) for turn in answered]
    products = [ep * lp for ep, lp in zip(eps, lps, strict=True)]
    count = len(answered)
    return Readiness(sum(products) / count, sum(eps) / count, sum(lps) / count, count)


@dataclass(slots=True)
class ReadinessResult:
    turns: list[Turn]  # one per evidence window: none for a question without one
    applicable: bool = False  # in the readiness population (evidence windows, τ > 0)
    readiness: Readiness | None = None  # None: not applicable, or no turn answered


# The results' `derived` entry of τ per task (seconds), when some task has evidence windows.
TAUS = "readiness_tau_s"


class ReadinessFamily(MetricFamily[ReadinessResult]):
    name = "readiness"
    member = "rd_all"
    constants = ("ars_gamma_e", "ars_gamma_l", "ars_epsilon")
    requires = (QA.name, PROACTIVE.name)
    headline = "acc_e"

    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> ReadinessResult:
        record, qa = evaluation.record, evaluation.result(QA)
        if isinstance(record, QARecord):
            turn = None if qa is None else qa_turn(record, qa.answer_t)
            return ReadinessResult([] if turn is None else [turn])
        proactive = evaluation.result(PROACTIVE)
        return ReadinessResult([] if proactive is None else proactive_turns(proactive))

    def settle(
        self, evaluations: Sequence[RecordEvaluation], profile: ScoringProfile
    ) -> dict[str, Any]:
        """τ per task (QA evidence windows and proactive targets are different populations),
        over the records with an evidence window; a population with τ = 0 is left out."""
        taus = {}
        for task in ("qa", "proactive"):
            members = [
                result
                for evaluation in evaluations
                if evaluation.record.task == task
                and (result := evaluation.result(self)) is not None
                and result.turns
            ]
            if not members:
                continue
            tau = median_duration([turn for result in members for turn in result.turns])
            taus[task] = tau
            if tau <= 0:
                continue
            for result in members:
                result.applicable = True
                result.readiness = readiness(result.turns, tau, profile)
        return {TAUS: taus} if taus else {}

    def fields(
        self, result: ReadinessResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        """Every record counts towards the evidence coverage; only one in the readiness
        population has readiness and accuracy fields."""
        if not result.applicable:
            return {"rd_all": 1.0}
        ready = result.readiness
        qa, proactive = evaluation.result(QA), evaluation.result(PROACTIVE)
        if qa is not None:
            correct, items = float(qa.correct), 1.0
        else:
            assert proactive is not None
            correct, items = proactive.score_sum, float(len(proactive.windows))
        return {
            "rd_all": 1.0,
            "rd_n": 1.0,
            "rd_ars": number(None if ready is None else ready.ars),
            "rd_ep": number(None if ready is None else ready.ep),
            "rd_lp": number(None if ready is None else ready.lp),
            "rd_acc": correct,
            "rd_acc_n": items,
        }

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        ars = Mean("rd_ars", "rd_n", "records")
        accuracy = Ratio("rd_acc", "rd_acc_n", "targets")
        return {
            "evidence_coverage": Ratio("rd_n", "rd_all", "records"),
            "ars": ars,
            "early_penalty": Mean("rd_ep", "rd_n", "records"),
            "late_penalty": Mean("rd_lp", "rd_n", "records"),
            "accuracy": accuracy,
            "acc_e": Combined(accuracy, ars, "*", like=ars),
        }

    def details(
        self, result: ReadinessResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        ready = result.readiness
        return {
            "applicable": result.applicable,
            "turns": [asdict(turn) for turn in result.turns],
            "ars": None if ready is None else ready.ars,
            "early_penalty": None if ready is None else ready.ep,
            "late_penalty": None if ready is None else ready.lp,
        }


READINESS = ReadinessFamily()

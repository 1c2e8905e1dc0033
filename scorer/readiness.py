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
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from streameval.core.benchmark.records import QARecord
from streameval.scorer.proactive import BEFORE_WINDOW, IN_WINDOW, ProactiveResult
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

"""The causality audit's decision rule (docs/robustness.md, "Decision rule"): when do outputs
that differ between streams identical before T prove a leak rather than nondeterminism?

Every task is streamed `REPEATS` times in each of three groups: A (the plain video), B (the
marked one) and A+ (A again, after the adapter saw B's future). Before T every stream is
the same, so an honest adapter's outputs there are independent draws of one distribution.
At a decision point, a group is *unanimous* when its repeats said the same. Evidence:

- *differs*: A and B each unanimous, and apart (a leak);
- *memory*: A and A+ each unanimous, and apart (a future remembered from an earlier session).

The tolerance: an honest adapter gives its usual output at each point with probability at
least 1 - P0, independently from session to session. Two unanimous groups disagree only if
one of them gave an unusual output in all its repeats, which has probability at most
`per_point = 1 - (1 - P0**r)**2`; a comparison over N points fails on d or more of them
with probability at most the binomial tail P(Bin(N, per_point) >= d). The threshold d* is
the smallest d whose tail is at most ALPHA / 2 for each of the two comparisons, so an
honest adapter with P0 or less is accused with probability at most ALPHA.

An adapter demonstrably more nondeterministic than P0 (its within-group disagreements too
many for P0, at level ALPHA) is `inconclusive`: the rule's arithmetic does not cover it.
"""

from __future__ import annotations

from math import exp, fsum, lgamma, log, log1p
from typing import Literal

from pydantic import BaseModel, computed_field

REPEATS = 3  # repeats of each task in each group
P0 = 0.02  # the nondeterminism per output the rule tolerates
ALPHA = 0.01  # the largest chance of accusing an honest adapter within that tolerance
COMPARISONS = 2  # A-B (leak) and A-A+ (memory)

Verdict = Literal["pass", "fail", "inconclusive"]
EvidenceKind = Literal["marker", "differs", "memory", "nondeterministic", "session_failed"]


def binomial_tail(n: int, p: float, d: int) -> float:
    """P(Bin(n, p) >= d)."""
    if d <= 0:
        return 1.0
    if p <= 0.0 or d > n:
        return 0.0
    if p >= 1.0:
        return 1.0
    # Summed upwards in log space: exact for small tails, no overflow for large n.
    return min(1.0, fsum(_pmf(n, p, k) for k in range(d, n + 1)))


def _pmf(n: int, p: float, k: int) -> float:
    return exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) + k * log(p) + (n - k) * log1p(-p))


def _upper_quantile(n: int, p: float, alpha: float) -> int:
    """The smallest m with P(Bin(n, p) > m) < alpha."""
    below, m = 0.0, 0
    while m < n:
        below += _pmf(n, p, m)
        if 1.0 - below < alpha:
            return m
        m += 1
    return n


class DecisionRule(BaseModel):
    """The rule as applied to one audit, with its numbers (stored with the verdict)."""

    repeats: int
    p0: float
    alpha: float
    points: int  # decision points compared in each comparison
    per_point: float  # the chance an honest point shows two unanimous groups apart
    threshold: int  # d*: points apart (in one comparison) that fail the adapter
    false_accusation: float  # the bound on P(fail) for an honest adapter within p0
    outputs: int  # outputs compared for nondeterminism (3 groups x repeats x points)
    nondeterminism_limit: int  # more disagreements than this: inconclusive

    @computed_field
    @property
    def statement(self) -> str:
        """The rule in one sentence, stored and printed with the verdict."""
        return (
            f"fail if >= {self.threshold} of {self.points} points show unanimous A and B (or A "
            f"and A+) apart over {self.repeats} repeats each; P(fail | honest, p <= "
            f"{self.p0:g}) <= {self.false_accusation:.1e}"
        )


def decision_rule(
    points: int, repeats: int = REPEATS, p0: float = P0, alpha: float = ALPHA
) -> DecisionRule:
    """The rule's threshold and bounds for an audit of `points` decision points."""
    per_point = 1 - (1 - p0**repeats) ** 2
    threshold = 1
    while binomial_tail(points, per_point, threshold) > alpha / COMPARISONS:
        threshold += 1
    outputs = 3 * repeats * points
    limit = _upper_quantile(outputs, p0, alpha)
    return DecisionRule(
        repeats=repeats,
        p0=p0,
        alpha=alpha,
        points=points,
        per_point=per_point,
        threshold=threshold,
        false_accusation=min(1.0, COMPARISONS * binomial_tail(points, per_point, threshold)),
        outputs=outputs,
        nondeterminism_limit=limit,
    )


def decide(counts: dict[str, int], rule: DecisionRule) -> tuple[Verdict, EvidenceKind | None]:
    """The verdict and the kind of evidence it rests on. A named marker fails whatever else
    happened; a failed session or nondeterminism beyond the rule's tolerance leaves the
    audit inconclusive; then `threshold` points apart in either comparison fail; fewer
    (possible only when the threshold is above 1) are inconclusive."""
    if counts["marker"]:
        return "fail", "marker"
    if counts["failed_sessions"]:
        return "inconclusive", "session_failed"
    if counts["nondeterministic"] > rule.nondeterminism_limit:
        return "inconclusive", "nondeterministic"
    for kind in ("differs", "memory"):
        if counts[kind] >= rule.threshold:
            return "fail", kind
    for kind in ("differs", "memory"):
        if counts[kind]:
            return "inconclusive", kind
    return "pass", None

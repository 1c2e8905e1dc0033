"""The causality audit's decision rule (core_server/analyses/causality_rule.py): its numbers,
its verdicts, and its false-accusation rate in simulation, through the same comparison of
points the audit applies to recorded outputs (causality_audit.compare_point)."""

from __future__ import annotations

import random

import pytest

from streameval.core.analyses.causality_audit import Point, compare_point, evidence_counts
from streameval.core.analyses.causality_rule import binomial_tail, decide, decision_rule
from streameval.core.analyses.causality_streams import GROUPS, AuditTask

POINTS = 23  # the audit's decision points before T for a polled adapter


def test_the_rule_for_the_audits_23_points() -> None:
    rule = decision_rule(POINTS)
    assert (rule.repeats, rule.p0, rule.alpha) == (3, 0.02, 0.01)
    assert rule.per_point == pytest.approx(2 * 0.02**3 - 0.02**6)  # 1.6e-5
    assert rule.threshold == 1
    # Two comparisons, each 1 - (1 - 1.6e-5)^23 = 3.68e-4.
    assert rule.false_accusation == pytest.approx(2 * (1 - (1 - rule.per_point) ** 23))
    assert rule.false_accusation == pytest.approx(7.3587e-4, rel=1e-4)
    # 207 outputs: P(Bin(207, 0.02) >= 10) < 1% <= P(... >= 9).
    assert (rule.outputs, rule.nondeterminism_limit) == (207, 9)
    assert binomial_tail(207, 0.02, 10) < 0.01 <= binomial_tail(207, 0.02, 9)
    assert rule.statement == (
        "fail if >= 1 of 23 points show unanimous A and B (or A and A+) apart over 3 repeats "
        "each; P(fail | honest, p <= 0.02) <= 7.4e-04"
    )


def test_more_points_raise_the_threshold_and_keep_the_bound() -> None:
    rule = decision_rule(2000)  # a frame-level adapter speaking at every frame
    assert rule.threshold == 2
    assert rule.false_accusation <= 0.01
    assert binomial_tail(2000, rule.per_point, 1) > 0.005  # why 1 would not do


def test_one_repeat_would_accuse_a_flaky_honest_adapter_often() -> None:
    """The old audit (one repeat each of A, A' and B; fail on any A-B difference while A
    and A' agree), at p = 0.015 over 23 points: a point fails when A and A' are usual and
    B not, or the reverse; P(fail) = 1 - (1 - 0.0148)^23 = 0.29 in the worst case."""
    p = 0.015
    per_point = (1 - p) ** 2 * p + p**2 * (1 - p)
    assert 1 - (1 - per_point) ** POINTS == pytest.approx(0.29, abs=0.005)


def _counts(**found: int) -> dict[str, int]:
    base = dict.fromkeys(("marker", "differs", "memory", "nondeterministic", "failed_sessions"), 0)
    return {**base, **found}


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ({}, ("pass", None)),
        ({"differs": 1}, ("fail", "differs")),
        ({"memory": 2}, ("fail", "memory")),
        ({"differs": 1, "nondeterministic": 9}, ("fail", "differs")),
        ({"differs": 5, "nondeterministic": 10}, ("inconclusive", "nondeterministic")),
        ({"marker": 1, "nondeterministic": 40}, ("fail", "marker")),
        ({"differs": 3, "failed_sessions": 1}, ("inconclusive", "session_failed")),
        ({"nondeterministic": 4}, ("pass", None)),
    ],
)
def test_the_verdict_rules(found: dict[str, int], expected: tuple) -> None:
    assert decide(_counts(**found), decision_rule(POINTS)) == expected


def test_a_threshold_above_one_makes_fewer_differences_inconclusive() -> None:
    rule = decision_rule(2000)
    assert decide(_counts(differs=1), rule) == ("inconclusive", "differs")
    assert decide(_counts(differs=2), rule) == ("fail", "differs")


# ----------------------------------------------------------------------------- simulation

TASK = AuditTask("t", {f"{g}{n}": f"{g}{n}" for g in GROUPS for n in (1, 2, 3)})
RULE = decision_rule(POINTS)
USUAL, REPLACED, LEAKED = (("final", "usual"),), (("final", "not sure"),), (("final", "leak"),)


def _simulated_verdict(rng: random.Random, p: float, leak_at: int | None = None) -> str:
    """One audit of 23 points of an adapter that replaces each output with "not sure" with
    probability p (the worst case: replaced outputs agree); `leak_at` a point where B says
    something else."""
    found = []
    for index in range(POINTS):
        point = Point(f"step {index}", float(index))
        said = {}
        for label in TASK.copies:
            usual = LEAKED if index == leak_at and label[:-1] == "B" else USUAL
            said[label] = {point: REPLACED if rng.random() < p else usual}
        found += compare_point(TASK, point, said, "QUOKKA")
    counts = evidence_counts(found, len(TASK.copies), POINTS)
    return decide(counts, RULE)[0]


@pytest.mark.parametrize("p", [0.02, 0.05, 0.1, 0.3])
def test_in_simulation_an_honest_adapter_is_failed_less_than_once_in_a_hundred(p: float):
    rng = random.Random(20261206)
    audits = 6000 if p < 0.1 else 1500
    verdicts = [_simulated_verdict(rng, p) for _ in range(audits)]
    failed = verdicts.count("fail") / audits
    assert failed <= 0.01
    if p == 0.02:
        # Within the rule's bound (7.4e-4 for two comparisons; one comparison here: 3.7e-4).
        assert verdicts.count("fail") <= 10
        assert verdicts.count("pass") / audits > 0.95
    if p >= 0.1:
        assert verdicts.count("inconclusive") / audits > 0.9  # too noisy to pass or fail


def test_in_simulation_a_leak_at_one_point_is_caught_through_the_noise() -> None:
    rng = random.Random(7)
    verdicts = [_simulated_verdict(rng, 0.02, leak_at=5) for _ in range(2000)]
    assert verdicts.count("fail") / 2000 > 0.85

"""Every metric family, by name, and which of them a scoring profile needs.

The order is the evaluation order, so a family comes after those it `requires`, and the
order of the families' entries in each per-record result. A profile names the families
whose metrics it reports; a name not registered here is a `ProfileError` when the profile
is used.
"""

from __future__ import annotations

from typing import Any

from streameval.scorer.metrics.family import MetricFamily
from streameval.scorer.metrics.ovo import OVO
from streameval.scorer.metrics.proactive import PROACTIVE
from streameval.scorer.metrics.qa import QA
from streameval.scorer.metrics.readiness import READINESS
from streameval.scorer.metrics.realstream import REALSTREAM
from streameval.scorer.metrics.streamingbench import STREAMINGBENCH
from streameval.scorer.metrics.workload import WORKLOAD
from streameval.scorer.profiles import ProfileError, ScoringProfile

FAMILIES: dict[str, MetricFamily[Any]] = {
    family.name: family
    for family in (WORKLOAD, QA, PROACTIVE, REALSTREAM, READINESS, OVO, STREAMINGBENCH)
}


def family(name: str) -> MetricFamily[Any]:
    try:
        return FAMILIES[name]
    except KeyError:
        raise ProfileError(
            f"unknown metric family {name!r}; known: {', '.join(FAMILIES)}"
        ) from None


def evaluated(profile: ScoringProfile) -> list[MetricFamily[Any]]:
    """The families a record is evaluated under, in registry order: the profile's own, those
    evaluated for every record, and whatever these require."""
    needed = {family(name).name for name in profile.families}
    needed |= {name for name, declared in FAMILIES.items() if declared.always_evaluated}
    pending = list(needed)
    while pending:
        for required in family(pending.pop()).requires:
            if required not in needed:
                needed.add(required)
                pending.append(required)
    return [declared for name, declared in FAMILIES.items() if name in needed]


def judges_content(profile: ScoringProfile) -> bool:
    """Whether scoring under this profile asks for content judgements (TRACE proactive
    windows, through them readiness, and RealStreamEval); the source benchmarks' own
    scorings match text by rule."""
    return any(declared.judged for declared in evaluated(profile))

"""What a metric family is: one module declares everything the scorer needs to know about it.

A family evaluates each record it applies to into a result of its own type (`evaluate`),
says what that result contributes to aggregation (`fields`), which statistics over those
fields it reports (`statistics`), and what a reader sees of it per record (`details`, the
family's entry in the results' `records`). It names its member field, which every record of
the family has (1.0): a slice without a member has no metrics of the family. It lists the
profile constants it reads (`constants`). Optional: content judgements (`judged`, with
`requests` and `apply`), and a pass over the whole run once every record is judged
(`settle`; readiness fixes its scale τ there).

A record's families are evaluated in registry order (registry.py), so a family reads the
results of the families it `requires` (readiness reads qa's and proactive's) from the
`RecordEvaluation` it is given. docs/metrics.md, "Adding a metric family", has an example.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.events import AdapterHelloPayload
from streameval.scorer.episodes import SessionTrace
from streameval.scorer.judging.judges import JudgeRequest
from streameval.scorer.metrics.statistic import Statistic
from streameval.scorer.profiles import ScoringProfile

R = TypeVar("R")
# A record's contribution to aggregation, by field name: a number (NaN: missing, or not in
# that metric's population) or a list of numbers (e.g. the response delays of its windows).
Fields = dict[str, float | list[float]]
NOT_RUN = "not_run"  # a record whose session recorded no event


def number(value: float | int | bool | None) -> float:
    """A field's value: a count or flag as a float, a missing one as NaN."""
    return math.nan if value is None else float(value)


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """What the run's numbers read of a record's session once the record is evaluated:
    small, unlike its trace (every frame, step and workload id), which a run's evaluation
    drops then so that scoring memory stays flat in the number of events."""

    status: str  # finished | failed | incomplete | not_run
    events: int
    failure_stage: str | None
    failure_reason: str | None
    failure_cause: str | None
    pacing: str | None
    adapter: AdapterHelloPayload | None
    probed: bool  # some of the record's probes were asked
    # A negative stream's numbers (robustness.py), read only for the records that are one.
    false_alarms: int
    watched_s: float


class TraceDropped(RuntimeError):
    """A record's trace was read after its evaluation dropped it: a scorer bug."""


@dataclass
class RecordEvaluation:
    """One record and its session, with the result of each family evaluated for it. The
    families evaluate from the session's whole `trace`; once they have, a run's evaluation
    drops it (`drop_trace`) and what follows reads the small `session` outcome."""

    record: QARecord | ProactiveRecord
    session: SessionOutcome
    held: SessionTrace | None  # the trace, until dropped
    frame_level: bool = False  # the run asked for a decision at every step
    results: dict[str, Any] = field(default_factory=dict)  # family name -> its result

    @property
    def trace(self) -> SessionTrace:
        if self.held is None:
            raise TraceDropped(f"record {self.record.record_id!r}: its trace was dropped")
        return self.held

    def drop_trace(self) -> None:
        self.held = None

    @property
    def status(self) -> str:
        return self.session.status

    def result(self, family: MetricFamily[R]) -> R | None:
        """The family's result (None: the family does not apply to this record, or the
        profile did not need it)."""
        return self.results.get(family.name)


class MetricFamily(ABC, Generic[R]):
    """A metric family; a subclass sets the class attributes and implements the three
    abstract methods, and its module exports one instance for the registry."""

    name: str  # the key of its metrics in the results, and of its entry in each record's
    member: str  # the field every record of the family has
    constants: tuple[str, ...]  # the profile constants its evaluation and metrics read
    requires: tuple[str, ...] = ()  # families whose results it reads (evaluated before it)
    # Evaluated for every record whatever the profile reports (its per-record entry is shown
    # even where its metrics are not: a QA record's prediction, every record's workload).
    always_evaluated: bool = False
    judged: bool = False  # its results ask for content judgements (`requests`, `apply`)
    headline: str | None = None  # the metric the per-task-type console table shows
    timing: frozenset[str] = frozenset()  # metrics on the Core's clock: pacing changes them

    @abstractmethod
    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> R | None:
        """The record's result, None when the family does not apply to it."""

    @abstractmethod
    def fields(self, result: R, evaluation: RecordEvaluation, profile: ScoringProfile) -> Fields:
        """The record's contribution to this family's statistics (after judging)."""

    @abstractmethod
    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        """The metrics this profile reports, by name, in the order the results list them."""

    def details(
        self, result: R, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        """The record's entry under this family's name in the per-record results."""
        return asdict(result)

    def requests(self, result: R) -> list[JudgeRequest]:
        """The content judgements the result waits for (a `judged` family's)."""
        return []

    def apply(
        self, result: R, scores: Mapping[JudgeRequest, float], profile: ScoringProfile
    ) -> None:
        """Give the result its judgements' scores."""

    def settle(
        self, evaluations: Sequence[RecordEvaluation], profile: ScoringProfile
    ) -> dict[str, Any]:
        """Fix what depends on the whole run, once every record is judged; returns the values
        it derived, for the results' `derived`."""
        return {}

"""Robustness runs (docs/robustness.md): which records each variant streamed, and the false
alarms on negative streams.

A run with the `robustness` condition (streameval/variants.py) streams every record clean
and once per variant. The scorer reports every metric per variant, each on that variant's
records only (`group_records`). Negative streams have no events, so no window metric means
anything on them; they give one number of their own (`negative_streams`):

    false alarms per hour = answered episodes after the instruction / video hours watched

summed over the negative sessions (a ratio of sums, so a long stream weighs more), with a
bootstrap interval clustered by video like every other metric's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from streameval.scorer.episodes import SessionTrace
from streameval.scorer.metrics.aggregate import bootstrap_counts, statistic_interval
from streameval.scorer.metrics.family import NOT_RUN, RecordEvaluation
from streameval.scorer.metrics.statistic import FieldTable, Ratio
from streameval.scorer.profiles import ScoringProfile
from streameval.variants import CLEAN, RobustnessCondition

SECONDS_PER_HOUR = 3600.0
_RATE = Ratio("neg_false_alarms", "neg_watched_s", "watched seconds", scale=SECONDS_PER_HOUR)
_KEY = "negative_streams"  # seeds the bootstrap of the rate


@dataclass(frozen=True)
class VariantGroups:
    """Positions (into the run's evaluations) of the records of each variant."""

    by_label: dict[str, list[int]]  # CLEAN first, then each perturbation in run order
    negative: list[int]


def group_records(
    condition: RobustnessCondition, evaluations: Sequence[RecordEvaluation]
) -> VariantGroups:
    labels = condition.labels(e.record.record_id for e in evaluations)
    negative_labels = {v.label for v in condition.variants if v.kind == "negative"}
    by_label: dict[str, list[int]] = {CLEAN: []}
    by_label |= {v.label: [] for v in condition.variants if v.kind == "perturbation"}
    negative: list[int] = []
    for position, evaluation in enumerate(evaluations):
        label = labels[evaluation.record.record_id]
        (negative if label in negative_labels else by_label[label]).append(position)
    return VariantGroups(by_label, negative)


class NegativeStreams(BaseModel):
    """False alarms on the negative streams of a robustness run."""

    records: int = Field(description="negative-stream records in the run")
    sessions: int = Field(description="of them, sessions that ran (finished or failed)")
    hours: float = Field(
        description="video hours watched after the instruction: per session, the last "
        "delivered frame's video time minus the instruction's, summed"
    )
    false_alarms: int = Field(
        description="answered response episodes (closed, not a silence token) that began "
        "after the instruction was sent, summed over the sessions"
    )
    false_alarms_per_hour: float | None = Field(description="false_alarms / hours")
    ci95: tuple[float, float] | None = Field(
        description="bootstrap interval clustered by video (None: the value draws on fewer "
        "than two videos)"
    )


def watched_s(trace: SessionTrace) -> float:
    """Video seconds the adapter watched under the instruction: from the instruction to the
    last frame it was sent (0 when the instruction never went out)."""
    if trace.task_t is None or not trace.frame_t:
        return 0.0
    return max(0.0, max(trace.frame_t) - trace.task_t)


def false_alarms(trace: SessionTrace, profile: ScoringProfile) -> int:
    """Answered episodes of the record's own task that began once the instruction was out:
    on a stream with no event, every one is a false alarm. Closed and silence-token rules
    are the proactive metrics' (an episode cut off by a failure is no answer)."""
    if trace.task_ns is None:
        return 0
    return sum(
        1
        for episode in trace.own_episodes
        if episode.closed and profile.is_answer(episode.text) and episode.onset_ns >= trace.task_ns
    )


def negative_streams(
    evaluations: Sequence[RecordEvaluation], profile: ScoringProfile
) -> NegativeStreams:
    table = FieldTable(
        [
            {
                "neg_false_alarms": float(e.session.false_alarms),
                "neg_watched_s": e.session.watched_s,
            }
            for e in evaluations
        ],
        [{} for _ in evaluations],
        [e.record.video_path for e in evaluations],
    )
    rate = _RATE.estimate(table)
    counts = bootstrap_counts(table.clusters, profile, _KEY)
    ci = None
    if rate is not None:
        ci = statistic_interval(_RATE, table, counts, profile.ci_level)
    return NegativeStreams(
        records=len(evaluations),
        sessions=sum(1 for e in evaluations if e.status != NOT_RUN),
        hours=float(table.column("neg_watched_s").sum()) / SECONDS_PER_HOUR,
        false_alarms=round(table.column("neg_false_alarms").sum()),
        false_alarms_per_hour=rate,
        ci95=ci,
    )

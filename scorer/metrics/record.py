"""One record, every metric family the profile needs: evaluate its session trace, then (after
the run's content judgements are made) give its per-record result and its aggregation
fields. What each family computes is the family's own (registry.py lists them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter, ValidationError

from streameval.core.benchmark.records import ProactiveRecord, QARecord, Record
from streameval.scorer.episodes import SessionTrace
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import JudgeRequest
from streameval.scorer.metrics.family import (
    NOT_RUN,
    MetricFamily,
    RecordEvaluation,
    SessionOutcome,
)
from streameval.scorer.metrics.registry import FAMILIES, evaluated
from streameval.scorer.metrics.robustness import false_alarms, watched_s
from streameval.scorer.profiles import ScoringProfile

_RECORD = TypeAdapter(Record)


def parse_record(data: dict[str, Any]) -> QARecord | ProactiveRecord:
    try:
        return _RECORD.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ScoreError(
            f"record {data.get('record_id', '?')!r} is not a valid benchmark record: "
            f"{where}: {first['msg']}"
        ) from None


def evaluate_record(
    record: QARecord | ProactiveRecord,
    trace: SessionTrace,
    profile: ScoringProfile,
    frame_level: bool = False,
) -> RecordEvaluation:
    """`frame_level`: the run asked for a decision at every step (the realstream protocol),
    so its QA records are RealStreamEval turns too."""
    evaluation = RecordEvaluation(record, session_outcome(trace, profile), trace, frame_level)
    for family in evaluated(profile):
        result = family.evaluate(evaluation, profile)
        if result is not None:
            evaluation.results[family.name] = result
    return evaluation


def session_outcome(trace: SessionTrace, profile: ScoringProfile) -> SessionOutcome:
    return SessionOutcome(
        status=NOT_RUN if trace.event_count == 0 else trace.status,
        events=trace.event_count,
        failure_stage=trace.failure_stage,
        failure_reason=trace.failure_reason,
        failure_cause=trace.failure_cause,
        pacing=trace.pacing,
        adapter=trace.adapter,
        probed=bool(trace.probes),
        false_alarms=false_alarms(trace, profile),
        watched_s=watched_s(trace),
    )


def _results(evaluation: RecordEvaluation) -> Iterator[tuple[MetricFamily[Any], Any]]:
    return ((FAMILIES[name], result) for name, result in evaluation.results.items())


def judge_requests(evaluation: RecordEvaluation) -> list[JudgeRequest]:
    return [
        request for family, result in _results(evaluation) for request in family.requests(result)
    ]


def apply_judgements(
    evaluation: RecordEvaluation, scores: Mapping[JudgeRequest, float], profile: ScoringProfile
) -> None:
    for family, result in _results(evaluation):
        family.apply(result, scores, profile)


def settle(evaluations: Sequence[RecordEvaluation], profile: ScoringProfile) -> dict[str, Any]:
    """The run-level pass of every family, once all records are judged: what they derived."""
    derived: dict[str, Any] = {}
    for family in evaluated(profile):
        derived |= family.settle(evaluations, profile)
    return derived


def fields(
    evaluation: RecordEvaluation, profile: ScoringProfile
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """The record's contribution to every metric: (scalar fields, list fields)."""
    scalars: dict[str, float] = {}
    lists: dict[str, list[float]] = {}
    for family, result in _results(evaluation):
        for name, value in family.fields(result, evaluation, profile).items():
            if isinstance(value, list):
                lists[name] = value
            else:
                scalars[name] = value
    return scalars, lists


def details(evaluation: RecordEvaluation, profile: ScoringProfile) -> dict[str, Any]:
    """The per-record result: what was predicted and assigned, and why it scored so; one
    entry per registered family (None where it was not evaluated or does not apply)."""
    record, session = evaluation.record, evaluation.session
    out: dict[str, Any] = {
        "record_id": record.record_id,
        "task": record.task,
        "task_type": record.task_type,
        "source_benchmark": record.source_benchmark,
        "video_path": record.video_path,
        "status": evaluation.status,
        "failure_stage": session.failure_stage,
        "failure_reason": session.failure_reason,
        "failure_cause": session.failure_cause,
        "events": session.events,
    }
    for name, family in FAMILIES.items():
        result = evaluation.results.get(name)
        out[name] = None if result is None else family.details(result, evaluation, profile)
    return out

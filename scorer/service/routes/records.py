"""A run's records: their scored results (filtered and paged, or one), one record's
timeline, and the benchmark record as the run stored it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query

from streameval.core.benchmark.records import Record
from streameval.core.store.store import Store
from streameval.scorer.report import RecordResult
from streameval.scorer.service.routes.params import (
    DEFAULT_PROFILE,
    Limit,
    Offset,
    Page,
    ProfileParam,
    page,
)
from streameval.scorer.service.routes.state import JudgeDep, ScoresDep, StoreDep
from streameval.scorer.service.timeline import RecordTimeline, record_timeline
from streameval.scorer.source import store_source

router = APIRouter(tags=["records"])
RecordStatus = Annotated[str | None, Query(description="finished, failed, incomplete, not_run")]


def no_record(run_id: str, record_id: str) -> HTTPException:
    """The 404 for a record the run does not have."""
    return HTTPException(404, f"run {run_id!r} has no record {record_id!r}")


def stored_record(store: Store, run_id: str, record_id: str) -> dict[str, Any]:
    """The benchmark record as the run stored it (question, options, answer, triggers)."""
    for data in store.records(run_id):
        if data["record_id"] == record_id:
            return data
    raise no_record(run_id, record_id)


@router.get("/runs/{run_id}/records", response_model=Page[RecordResult])
def records(
    run_id: str,
    scores: ScoresDep,
    profile: ProfileParam = DEFAULT_PROFILE,
    task: str | None = None,
    task_type: str | None = None,
    source_benchmark: str | None = None,
    status: RecordStatus = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> dict[str, Any]:
    """Per-record results (prediction, assignment, scores), ordered by record id."""
    wanted = {
        "task": task,
        "task_type": task_type,
        "source_benchmark": source_benchmark,
        "status": status,
    }
    chosen = [
        result
        for result in scores.get(run_id, profile).records
        if all(value is None or getattr(result, key) == value for key, value in wanted.items())
    ]
    return page(chosen, offset, limit)


@router.get("/runs/{run_id}/records/{record_id}", response_model=RecordResult)
def record(
    run_id: str, record_id: str, scores: ScoresDep, profile: ProfileParam = DEFAULT_PROFILE
) -> RecordResult:
    """One record's result (prediction, assignment, scores)."""
    for result in scores.get(run_id, profile).records:
        if result.record_id == record_id:
            return result
    raise no_record(run_id, record_id)


@router.get("/runs/{run_id}/records/{record_id}/timeline", response_model=RecordTimeline)
def timeline(
    run_id: str,
    record_id: str,
    store: StoreDep,
    judge: JudgeDep,
    profile: ProfileParam = DEFAULT_PROFILE,
) -> RecordTimeline:
    """Frames, target windows, response episodes (onsets, assignment, false alarms)."""
    source = store_source(store, run_id)
    if not any(r["record_id"] == record_id for r in source.records):
        raise no_record(run_id, record_id)
    return record_timeline(source, record_id, profile, judge)


@router.get("/runs/{run_id}/records/{record_id}/annotation", response_model=Record)
def annotation(run_id: str, record_id: str, store: StoreDep) -> dict[str, Any]:
    """The benchmark record as stored with the run: question or instruction, options,
    answer, evidence, triggers."""
    return stored_record(store, run_id, record_id)

"""The runs in the store: the list (newest first), one run's details and its live progress."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from streameval.scorer.service.dashboard.progress import RunProgress, run_progress
from streameval.scorer.service.routes.params import Limit, Offset, Page, page
from streameval.scorer.service.routes.state import MeterDep, StoreDep
from streameval.scorer.service.run_details import RunDetail, RunSummary, run_detail, run_summary

router = APIRouter(tags=["runs"])


@router.get("/runs", response_model=Page[RunSummary])
def runs(store: StoreDep, offset: Offset = 0, limit: Limit = 50) -> dict[str, Any]:
    """Runs, newest first, with their declared conditions."""
    return page([run_summary(info) for info in store.list_runs()], offset, limit)


@router.get("/runs/{run_id}", response_model=RunDetail)
def run(run_id: str, store: StoreDep) -> dict[str, Any]:
    """A run with its configuration, library versions, event count and sessions."""
    return run_detail(store, run_id)


@router.get("/runs/{run_id}/progress", response_model=RunProgress)
def progress(run_id: str, store: StoreDep, meter: MeterDep) -> RunProgress:
    """Live progress: sessions per status, running and failed sessions, events per second
    (measured between polls of this endpoint)."""
    return run_progress(store, run_id, meter)

"""What the results API and the HTML report say of a run: its summary (declared
conditions) and its details (configuration, library versions, event count, sessions per
status, stored analyses), as models and as read from the store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from streameval.core.store.store import RunInfo, Store


class RunSummary(BaseModel):
    run_id: str
    created_at: datetime
    finished_at: datetime | None
    status: str
    benchmark: str
    config_hash: str
    profile: str | None
    pacing: str | None
    conditions: dict[str, Any]


class RunDetail(RunSummary):
    config: dict[str, Any]
    versions: dict[str, str]
    events: int
    sessions: dict[str, int]
    # Analyses stored with the run, by name: a capacity search's curve, a causality audit.
    analyses: dict[str, Any] = {}


def run_summary(info: RunInfo) -> dict[str, Any]:
    """A run's identity, status and declared conditions (a RunSummary's fields)."""
    return {
        "run_id": info.run_id,
        "created_at": info.created_at,
        "finished_at": info.finished_at,
        "status": info.status,
        "benchmark": info.benchmark,
        "config_hash": info.config_hash,
        "profile": info.config.get("profile"),
        "pacing": info.config.get("pacing"),
        "conditions": info.conditions,
    }


def run_detail(store: Store, run_id: str) -> dict[str, Any]:
    """A run with its configuration, library versions, event count and sessions per status."""
    info = store.get_run(run_id)
    statuses: dict[str, int] = {}
    for session in store.sessions(run_id):
        statuses[session.status] = statuses.get(session.status, 0) + 1
    return {
        **run_summary(info),
        "config": info.config,
        "versions": info.versions,
        "events": store.count_events(run_id),
        "sessions": statuses,
        "analyses": store.analyses(run_id),
    }

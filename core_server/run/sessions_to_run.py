"""Which of a run's stored sessions an execution runs: every one that has not ended and,
with `retry_failed`, those that failed for infrastructure reasons; other failures are
final. A session that had started is reset (its partial events deleted) and redone from
its start as a new attempt, unless a scale-out worker holds it under a live lease."""

from __future__ import annotations

from dataclasses import dataclass

from streameval.core.store.queue import WorkerIdentity
from streameval.core.store.run_lease import held_elsewhere
from streameval.core.store.store import SessionInfo, Store
from streameval.events import FailureCause, failure_cause


def session_failure_cause(session: SessionInfo) -> str | None:
    """A failed session's cause; derived from its stage for sessions stored before the Core
    recorded causes."""
    if session.status != "failed":
        return None
    if session.failure_cause is not None:
        return session.failure_cause
    return failure_cause({"stage": session.failure_stage, "reason": session.failure_reason})


@dataclass(frozen=True)
class SessionsToRun:
    todo: list[SessionInfo]  # in the run's stored order
    retried: set[str]  # ids of the failed sessions among them


def sessions_to_run(stored: list[SessionInfo], retry_failed: bool) -> SessionsToRun:
    retried = {
        s.session_id
        for s in stored
        if retry_failed and session_failure_cause(s) == FailureCause.INFRASTRUCTURE
    }
    todo = [s for s in stored if s.status not in ("finished", "failed") or s.session_id in retried]
    return SessionsToRun(todo, retried)


def reset_started(
    store: Store, run_id: str, todo: list[SessionInfo], identity: WorkerIdentity
) -> None:
    """Reset the sessions to run that had started: running when the Core died, or retried;
    one a scale-out worker holds under a live lease is left to it."""
    now = store.clock()
    for session in todo:
        if session.status != "pending" and not held_elsewhere(session, identity, now):
            store.reset_session(run_id, session.session_id)

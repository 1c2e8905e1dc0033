"""The sessions of a run in the store: adding them, their progress and outcome, and
starting one over. The work queue that leases sessions to workers (queue.py) starts an
attempt with the same `reset_values` and `delete_session_events`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Row, delete, null, select

from streameval.core.store import models
from streameval.core.store.database import StoreDatabase, check_status, retried, utc_now
from streameval.core.store.light import SessionInfo, StoreError


def reset_values() -> dict[str, Any]:
    """A session's columns as a new attempt starts them: pending, nothing recorded."""
    table = models.sessions
    return {
        "status": "pending",
        "attempt": table.c.attempt + 1,
        "endpoint": None,
        "failure_stage": None,
        "failure_reason": None,
        "failure_cause": None,
        "adapter": null(),  # SQL NULL; a bare None would store JSON null
        "started_at": None,
        "finished_at": None,
        "lease_owner": None,
        "lease_expires_at": None,
        "host": None,
        "worker_id": None,
    }


def delete_session_events(conn: Connection, run_id: str, session_id: str) -> None:
    events = models.events
    conn.execute(delete(events).where(events.c.run_id == run_id, events.c.session_id == session_id))


class StoreSessions(StoreDatabase):
    """The Store's sessions (the `sessions` table)."""

    def add_sessions(
        self,
        run_id: str,
        sessions: Sequence[tuple[str, list[str]]],
        expected_s: Mapping[str, float] | None = None,
    ) -> None:
        """Pending sessions; `expected_s`: the video seconds each streams, by session id
        (0 for one left out): claims take the longest first."""
        durations = expected_s or {}
        rows = [
            {
                "run_id": run_id,
                "session_id": session_id,
                "record_ids": list(record_ids),
                "status": "pending",
                "attempt": 0,
                "expected_s": durations.get(session_id, 0.0),
            }
            for session_id, record_ids in sessions
        ]
        self._insert_for_run(run_id, models.sessions, rows, "sessions")

    @retried
    def sessions(self, run_id: str) -> list[SessionInfo]:
        table = models.sessions
        with self.transaction(f"cannot read sessions of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table).where(table.c.run_id == run_id).order_by(table.c.session_id)
            )
            return [_session_info(row) for row in rows]

    @retried
    def set_session_status(
        self,
        run_id: str,
        session_id: str,
        status: str,
        *,
        endpoint: str | None = None,
        stage: str | None = None,
        reason: str | None = None,
        cause: str | None = None,
        adapter: dict[str, Any] | None = None,
        owner: str | None = None,
    ) -> bool:
        """Record a session's progress; None leaves endpoint, stage, reason, cause and
        adapter (the hello's identity) as they were.

        With `owner`, only while that worker holds the session's lease (False otherwise:
        the lease expired and the session belongs to another attempt); an ended session's
        lease is released."""
        check_status(status, models.SESSION_STATUSES, "session")
        values: dict[str, Any] = {"status": status}
        if status == "running":
            values["started_at"] = utc_now()
        elif status in ("finished", "failed"):
            values["finished_at"] = utc_now()
            values.update(lease_owner=None, lease_expires_at=None)
        # str(): a stage or cause may come as a StrEnum member, which a database driver
        # could adapt by its name; the column holds its value.
        optional = {
            "endpoint": endpoint,
            "failure_stage": None if stage is None else str(stage),
            "failure_reason": reason,
            "failure_cause": None if cause is None else str(cause),
            "adapter": adapter,
        }
        values.update({key: value for key, value in optional.items() if value is not None})
        with self.transaction(f"cannot update session {session_id!r} of run {run_id!r}") as conn:
            if owner is not None:
                table = models.sessions
                held = conn.execute(
                    table.update()
                    .where(
                        table.c.run_id == run_id,
                        table.c.session_id == session_id,
                        table.c.lease_owner == owner,
                    )
                    .values(**values)
                )
                return held.rowcount == 1
            self._update_session(conn, run_id, session_id, values)
        return True

    def reset_session(self, run_id: str, session_id: str) -> None:
        """Forget a session's events so a resumed run can replay it from seq 0."""
        with self.transaction(f"cannot reset session {session_id!r} of run {run_id!r}") as conn:
            self._update_session(conn, run_id, session_id, reset_values())
            delete_session_events(conn, run_id, session_id)

    def _update_session(
        self, conn: Connection, run_id: str, session_id: str, values: dict[str, Any]
    ) -> None:
        table = models.sessions
        where = (table.c.run_id == run_id, table.c.session_id == session_id)
        if conn.execute(table.update().where(*where).values(**values)).rowcount == 0:
            self._require_run(conn, run_id)
            raise StoreError(f"unknown session {session_id!r} in run {run_id!r}")


def _session_info(row: Row[Any]) -> SessionInfo:
    return SessionInfo(**row._asdict())

"""The store as a work queue: workers claim a run's sessions with leases.

A claim takes one claimable session (pending, or running under a lease that expired because
its worker died) and gives it to the worker until `lease_expires_at`, which the worker pushes
forward while the session runs (`renew`). Claiming an expired session starts a new attempt:
its partial events are deleted first. Ending the session (`Store.set_session_status` with
`owner=`) releases the lease; a worker that lost its lease can no longer write the session's
events or status, so exactly one attempt of each session is counted.

Claims are optimistic, the same way on SQLite and PostgreSQL: the update that takes the
session names the status and attempt the claimer saw, so of two racing claimers one wins and
the other tries the next candidate. On PostgreSQL, `FOR UPDATE SKIP LOCKED` keeps racing
claimers on different candidates in the first place. Lease deadlines are compared with each
worker's clock (UTC): the hosts' clocks must agree to well within a lease (NTP does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Select, and_, func, or_, select, update
from sqlalchemy.engine import Connection

from streameval.core.store import models
from streameval.core.store.store import (
    SessionInfo,
    Store,
    delete_session_events,
    reset_values,
)

# Runs whose sessions workers take: a run being created has all of its sessions already.
CLAIMABLE_RUN_STATUSES = ("created", "running", "interrupted")


@dataclass(frozen=True)
class WorkerIdentity:
    worker_id: str
    host: str


def _now() -> datetime:
    return datetime.now(UTC)


def _candidates(conn: Connection, run_id: str | None, now: datetime, limit: int) -> Select:
    sessions, runs = models.sessions, models.runs
    query = (
        select(sessions.c.run_id, sessions.c.session_id, sessions.c.status, sessions.c.attempt)
        .join(runs, runs.c.run_id == sessions.c.run_id)
        .where(
            runs.c.status.in_(CLAIMABLE_RUN_STATUSES),
            or_(
                sessions.c.status == "pending",
                and_(sessions.c.status == "running", sessions.c.lease_expires_at < now),
            ),
        )
        .order_by(runs.c.created_at, sessions.c.run_id, sessions.c.session_id)
        .limit(limit)
    )
    if run_id is not None:
        query = query.where(sessions.c.run_id == run_id)
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True, of=sessions)
    return query


class SessionQueue:
    """Claim, renew and inspect leases on one store."""

    def __init__(self, store: Store, worker: WorkerIdentity, lease_s: float) -> None:
        self.store = store
        self.worker = worker
        self.lease = timedelta(seconds=lease_s)

    def claim(self, run_id: str | None = None, endpoint: str | None = None) -> SessionInfo | None:
        """One claimable session, now leased to this worker; None when none is left."""
        what = f"cannot claim a session{'' if run_id is None else f' of run {run_id!r}'}"
        # A lost race moves on to the next candidate; a few rounds cover any contention.
        for _ in range(20):
            with self.store.transaction(what) as conn:
                now = _now()
                rows = conn.execute(_candidates(conn, run_id, now, limit=8)).all()
                if not rows:
                    return None
                for row in rows:
                    if self._take(conn, row, now, endpoint):
                        return self._read(conn, row.run_id, row.session_id)
        return None

    def _take(self, conn: Connection, row, now: datetime, endpoint: str | None) -> bool:
        table = models.sessions
        values = reset_values() if row.status == "running" else {}
        values.update(
            status="running",
            started_at=now,
            lease_owner=self.worker.worker_id,
            lease_expires_at=now + self.lease,
            host=self.worker.host,
            worker_id=self.worker.worker_id,
            endpoint=endpoint,
        )
        taken = conn.execute(
            update(table)
            .where(
                table.c.run_id == row.run_id,
                table.c.session_id == row.session_id,
                table.c.status == row.status,
                table.c.attempt == row.attempt,
            )
            .values(**values)
        )
        if taken.rowcount != 1:
            return False
        if row.status == "running":  # an expired lease: the dead worker's attempt is void
            delete_session_events(conn, row.run_id, row.session_id)
        return True

    @staticmethod
    def _read(conn: Connection, run_id: str, session_id: str) -> SessionInfo:
        table = models.sessions
        row = conn.execute(
            select(table).where(table.c.run_id == run_id, table.c.session_id == session_id)
        ).one()
        return SessionInfo(**row._asdict())

    def renew(self, run_id: str, session_ids: list[str]) -> set[str]:
        """Push the leases of the sessions this worker runs forward; returns the ones it
        no longer holds (they expired and another worker took them)."""
        if not session_ids:
            return set()
        table = models.sessions
        owned = (table.c.run_id == run_id, table.c.lease_owner == self.worker.worker_id)
        with self.store.transaction(f"cannot renew leases in run {run_id!r}") as conn:
            conn.execute(
                update(table)
                .where(*owned, table.c.session_id.in_(session_ids))
                .values(lease_expires_at=_now() + self.lease)
            )
            held = conn.execute(
                select(table.c.session_id).where(*owned, table.c.session_id.in_(session_ids))
            )
            return set(session_ids) - {row.session_id for row in held}

    def release(self, run_id: str, session_id: str) -> None:
        """Give a session this worker holds back to the queue as pending, a new attempt."""
        table = models.sessions
        with self.store.transaction(f"cannot release session {session_id!r}") as conn:
            released = conn.execute(
                update(table)
                .where(
                    table.c.run_id == run_id,
                    table.c.session_id == session_id,
                    table.c.status == "running",
                    table.c.lease_owner == self.worker.worker_id,
                )
                .values(**reset_values())
            )
            if released.rowcount == 1:
                delete_session_events(conn, run_id, session_id)

    def outstanding(self, run_id: str | None = None) -> int:
        """Sessions of claimable runs that other workers hold now: they may come back."""
        sessions, runs = models.sessions, models.runs
        query = (
            select(func.count())
            .select_from(sessions.join(runs, runs.c.run_id == sessions.c.run_id))
            .where(runs.c.status.in_(CLAIMABLE_RUN_STATUSES), sessions.c.status == "running")
        )
        if run_id is not None:
            query = query.where(sessions.c.run_id == run_id)
        with self.store.transaction("cannot count running sessions") as conn:
            return conn.execute(query).scalar_one()

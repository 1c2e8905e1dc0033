"""The store as a work queue: workers claim a run's sessions with leases.

A claim takes one claimable session (pending, or running under a lease that expired because
its worker died) and gives it to the worker until `lease_expires_at`, which the worker pushes
forward while the session runs (`renew`). Claiming an expired session starts a new attempt:
its partial events are deleted first. Expired sessions go before pending ones (a dead
worker's session is not left for the run's tail); `upcoming` lists what claims would take
next, in their order, without taking it. Ending the session (`Store.set_session_status` with
`owner=`) releases the lease; a worker that lost its lease can no longer write the session's
events or status, so exactly one attempt of each session is counted.

Claims are optimistic, the same way on SQLite and PostgreSQL: the update that takes the
session names the status and attempt the claimer saw, so of two racing claimers one wins and
the other tries the next candidate. On PostgreSQL, `FOR UPDATE SKIP LOCKED` keeps racing
claimers on different candidates in the first place. Lease deadlines are set and compared
with the database's clock (clock.py), in the statements that claim and renew: a worker
whose host clock is wrong neither steals live leases nor lets its own lapse.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from sqlalchemy import Select, Update, bindparam, func, select, update
from sqlalchemy.engine import Connection

from streameval.core.store import models
from streameval.core.store.clock import store_now
from streameval.core.store.light import SessionInfo
from streameval.core.store.sessions import delete_session_events, reset_values
from streameval.core.store.store import Store

# Runs whose sessions workers take: a run being created has all of its sessions already.
CLAIMABLE_RUN_STATUSES = ("created", "running", "interrupted")


@dataclass(frozen=True)
class WorkerIdentity:
    worker_id: str
    host: str


def _claimable_runs() -> Select:
    runs = models.runs
    return (
        select(runs.c.run_id)
        .where(runs.c.status.in_(CLAIMABLE_RUN_STATUSES))
        .order_by(runs.c.created_at, runs.c.run_id)
    )


# The claim's statements are built once, with bound parameters: a claim is a few
# milliseconds of work and building SQLAlchemy expressions anew would be a good part of it.
@functools.cache
def _claimable_sessions(expired: bool) -> Select:
    """The run's pending sessions (with `expired`, its running ones whose lease ran out by
    the database's clock), whole rows in the order claims take them (by session id), if the
    run takes claims. The (run_id, status, session_id) index hands them over without
    sorting the run's sessions."""
    sessions, runs = models.sessions, models.runs
    query = (
        select(sessions)
        .join(runs, runs.c.run_id == sessions.c.run_id)
        .where(
            sessions.c.run_id == bindparam("b_run"),
            runs.c.status.in_(CLAIMABLE_RUN_STATUSES),
        )
    )
    if expired:
        query = query.where(
            sessions.c.status == "running", sessions.c.lease_expires_at < store_now()
        )
    else:
        query = query.where(sessions.c.status == "pending")
    return query.order_by(sessions.c.session_id)


@functools.cache
def _candidate(expired: bool, postgresql: bool) -> Select:
    """The first of `_claimable_sessions`; on PostgreSQL, rows another claimer has locked
    are skipped."""
    query = _claimable_sessions(expired).limit(1)
    if postgresql:
        query = query.with_for_update(skip_locked=True, of=models.sessions)
    return query


@functools.cache
def _upcoming(expired: bool) -> Select:
    return _claimable_sessions(expired).limit(bindparam("b_limit"))


# A session whose worker died is taken before any pending one: it was started earlier, so
# redoing it at the run's tail would make the tail longer than one session (docs/scale.md).
CLAIM_ORDER = (True, False)  # expired leases, then pending sessions


@functools.cache
def _take_statement(stealing: bool) -> Update:
    """Take the session if it is still as the claimer saw it (status and attempt; a stolen
    one's lease still expired), leased to the claimer; returns its row."""
    table = models.sessions
    seen = [
        table.c.run_id == bindparam("b_run"),
        table.c.session_id == bindparam("b_session"),
        table.c.status == bindparam("b_status"),
        table.c.attempt == bindparam("b_attempt"),
    ]
    values = reset_values() if stealing else {}
    if stealing:
        seen.append(table.c.lease_expires_at < store_now())
    values.update(
        status="running",
        started_at=store_now(),
        lease_owner=bindparam("b_owner"),
        lease_expires_at=store_now(bindparam("b_lease_s")),
        host=bindparam("b_host"),
        worker_id=bindparam("b_owner"),
        endpoint=bindparam("b_endpoint"),
    )
    return update(table).where(*seen).values(**values).returning(table)


class SessionQueue:
    """Claim, renew and inspect leases on one store."""

    def __init__(self, store: Store, worker: WorkerIdentity, lease_s: float) -> None:
        self.store = store
        self.worker = worker
        self.lease_s = lease_s

    def claim(self, run_id: str | None = None, endpoint: str | None = None) -> SessionInfo | None:
        """One claimable session, now leased to this worker; None when none is left."""
        what = f"cannot claim a session{'' if run_id is None else f' of run {run_id!r}'}"
        # A lost race (SQLite has no row locks to skip) moves on to the next candidate.
        for _ in range(50):
            with self.store.transaction(what) as conn:
                runs = [run_id] if run_id else list(conn.execute(_claimable_runs()).scalars())
                found, taken = self._claim_once(conn, runs, endpoint)
            if taken is not None or not found:
                return taken
        return None

    def _claim_once(
        self, conn: Connection, runs: list[str], endpoint: str | None
    ) -> tuple[bool, SessionInfo | None]:
        """(whether a candidate was found, the session taken)."""
        postgresql = conn.dialect.name == "postgresql"
        for run in runs:
            for expired in CLAIM_ORDER:
                row = conn.execute(_candidate(expired, postgresql), {"b_run": run})
                candidate = row.first()
                if candidate is not None:
                    return True, self._take(conn, run, candidate, endpoint)
        return False, None

    def _take(self, conn: Connection, run_id: str, row, endpoint: str | None) -> SessionInfo | None:
        stealing = row.status == "running"  # an expired lease: the dead worker's attempt is void
        parameters = {
            "b_run": run_id,
            "b_session": row.session_id,
            "b_status": row.status,
            "b_attempt": row.attempt,
            "b_lease_s": self.lease_s,
            "b_owner": self.worker.worker_id,
            "b_host": self.worker.host,
            "b_endpoint": endpoint,
        }
        taken = conn.execute(_take_statement(stealing), parameters).first()
        if taken is None:
            return None
        if stealing:
            delete_session_events(conn, run_id, row.session_id)
        return SessionInfo(**taken._asdict())

    def upcoming(self, run_id: str | None, limit: int) -> list[SessionInfo]:
        """The first `limit` sessions claims would take now (of `run_id`, or of every
        claimable run), in that order, claiming none: what a worker may prepare ahead."""
        found: list[SessionInfo] = []
        with self.store.transaction("cannot list the sessions to claim") as conn:
            runs = [run_id] if run_id else list(conn.execute(_claimable_runs()).scalars())
            for run in runs:
                for expired in CLAIM_ORDER:
                    if len(found) >= limit:
                        return found
                    rows = conn.execute(
                        _upcoming(expired), {"b_run": run, "b_limit": limit - len(found)}
                    )
                    found.extend(SessionInfo(**row._asdict()) for row in rows)
        return found

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
                .values(lease_expires_at=store_now(self.lease_s))
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
        """Sessions of claimable runs that other workers hold now: they may come back (if
        that worker dies). This worker's own running sessions will not, so its idle slots
        stop at once, and a session running under no lease (a Core before leases) never
        comes back by itself."""
        sessions, runs = models.sessions, models.runs
        query = (
            select(func.count())
            .select_from(sessions.join(runs, runs.c.run_id == sessions.c.run_id))
            .where(
                runs.c.status.in_(CLAIMABLE_RUN_STATUSES),
                sessions.c.status == "running",
                sessions.c.lease_owner != self.worker.worker_id,
            )
        )
        if run_id is not None:
            query = query.where(sessions.c.run_id == run_id)
        with self.store.transaction("cannot count running sessions") as conn:
            return conn.execute(query).scalar_one()


def sessions_left(store: Store, run_id: str | None = None) -> int:
    """Pending or running sessions of claimable runs (of `run_id`): work that is not done."""
    sessions, runs = models.sessions, models.runs
    query = (
        select(func.count())
        .select_from(sessions.join(runs, runs.c.run_id == sessions.c.run_id))
        .where(
            runs.c.status.in_(CLAIMABLE_RUN_STATUSES),
            sessions.c.status.in_(("pending", "running")),
        )
    )
    if run_id is not None:
        query = query.where(sessions.c.run_id == run_id)
    with store.transaction("cannot count the sessions left") as conn:
        return conn.execute(query).scalar_one()

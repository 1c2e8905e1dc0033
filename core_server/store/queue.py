"""The store as a work queue: workers claim a run's sessions with leases.

A claim takes one claimable session (pending, or running under a lease that expired because
its worker died) and gives it to the worker until `lease_expires_at`, which the worker pushes
forward while the session runs (`renew`). Claiming an expired session starts a new attempt:
its partial events are deleted first. Expired sessions go before pending ones (a dead
worker's session is not left for the run's tail); `upcoming` lists what claims would take
next, in their order, without taking it. Ending the session (`Store.set_session_status` with
`owner=`) releases the lease; a worker that lost its lease can no longer write the session's
events or status, so exactly one attempt of each session is counted.

The order claims take and their SQL are claim_statements.py's. Lease deadlines are set and
compared with the database's clock (clock.py), in the statements that claim and renew: a
worker whose host clock is wrong neither steals live leases nor lets its own lapse.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.engine import Connection, Row

from streameval.core.store import models
from streameval.core.store.claim_statements import (
    CLAIM_ORDER,
    CLAIMABLE_RUN_STATUSES,
    candidate,
    claim_in_one,
    claimable_runs,
    take,
    upcoming,
)
from streameval.core.store.clock import store_now
from streameval.core.store.light import SessionInfo
from streameval.core.store.sessions import delete_session_events, reset_values
from streameval.core.store.store import Store


@dataclass(frozen=True)
class WorkerIdentity:
    worker_id: str
    host: str


class SessionQueue:
    """Claim, renew and inspect leases on one store."""

    def __init__(self, store: Store, worker: WorkerIdentity, lease_s: float) -> None:
        self.store = store
        self.worker = worker
        self.lease_s = lease_s

    def claim(self, run_id: str | None = None, endpoint: str | None = None) -> SessionInfo | None:
        """One claimable session, now leased to this worker; None when none is left."""
        what = f"cannot claim a session{'' if run_id is None else f' of run {run_id!r}'}"
        postgresql = self.store.engine.dialect.name == "postgresql"
        # A lost race (SQLite has no row locks to skip; on PostgreSQL a row that changed
        # under the lock drops out of the pick) moves on to the next candidate.
        for _ in range(50):
            if postgresql:
                found, taken = self._claim_postgresql(run_id, endpoint, what)
            else:
                with self.store.transaction(what) as conn:
                    found, taken = self._claim_sqlite(conn, self._runs(conn, run_id), endpoint)
            if taken is not None or not found:
                return taken
        return None

    @staticmethod
    def _runs(conn: Connection, run_id: str | None) -> list[str]:
        return [run_id] if run_id else list(conn.execute(claimable_runs()).scalars())

    def _claim_postgresql(
        self, run_id: str | None, endpoint: str | None, what: str
    ) -> tuple[bool, SessionInfo | None]:
        """(whether a candidate was found, the session taken): one statement that commits
        by itself (a round trip, no BEGIN or COMMIT). A stolen session's old events are
        deleted afterwards, before it runs: the dead worker's writes are fenced off by then,
        and a claimer that fails in between leaves the lease to expire, the session to be
        stolen again."""
        found = False
        with self.store.autocommitted(what) as conn:
            for run in self._runs(conn, run_id):
                taken = conn.execute(claim_in_one(), self._lease(run, endpoint)).first()
                if taken is not None:
                    break
                found = found or conn.execute(candidate(False), {"b_run": run}).first() is not None
            else:
                return found, None
        row = taken._asdict()
        if row.pop("seen") == "running":
            with self.store.transaction(what) as conn:
                delete_session_events(conn, row["run_id"], row["session_id"])
        return True, SessionInfo(**row)

    def _claim_sqlite(
        self, conn: Connection, runs: list[str], endpoint: str | None
    ) -> tuple[bool, SessionInfo | None]:
        """(whether a candidate was found, the session taken)."""
        for run in runs:
            row = conn.execute(candidate(False), {"b_run": run}).first()
            if row is not None:
                return True, self._take(conn, row, endpoint)
        return False, None

    def _lease(self, run_id: str, endpoint: str | None) -> dict[str, object]:
        return {
            "b_run": run_id,
            "b_lease_s": self.lease_s,
            "b_owner": self.worker.worker_id,
            "b_host": self.worker.host,
            "b_endpoint": endpoint,
        }

    def _take(self, conn: Connection, row: Row, endpoint: str | None) -> SessionInfo | None:
        stealing = row.status == "running"  # an expired lease: the dead worker's attempt is void
        parameters = self._lease(row.run_id, endpoint)
        parameters.update(b_session=row.session_id, b_status=row.status, b_attempt=row.attempt)
        taken = conn.execute(take(stealing), parameters).first()
        if taken is None:
            return None
        if stealing:
            delete_session_events(conn, row.run_id, row.session_id)
        return SessionInfo(**taken._asdict())

    def upcoming(self, run_id: str | None, limit: int) -> list[SessionInfo]:
        """The first `limit` sessions claims would take now (of `run_id`, or of every
        claimable run), in that order, claiming none: what a worker may prepare ahead."""
        found: list[SessionInfo] = []
        with self.store.transaction("cannot list the sessions to claim") as conn:
            runs = self._runs(conn, run_id)
            for run in runs:
                for expired in CLAIM_ORDER:
                    if len(found) >= limit:
                        return found
                    rows = conn.execute(
                        upcoming(expired), {"b_run": run, "b_limit": limit - len(found)}
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

    def ran_last(self, session: SessionInfo) -> bool:
        """Whether the session's latest attempt is still the one this worker claimed as
        `session`: false once another worker took it over (this worker's lease ran out)."""
        table = models.sessions
        with self.store.transaction(f"cannot read session {session.session_id!r}") as conn:
            row = conn.execute(
                select(table.c.attempt, table.c.worker_id).where(
                    table.c.run_id == session.run_id, table.c.session_id == session.session_id
                )
            ).first()
        return row is not None and tuple(row) == (session.attempt, self.worker.worker_id)

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

"""The SQL of a claim (store/queue.py): which session claims take next, and taking it.

Order: sessions whose lease expired (their worker died) before pending ones, so a dead
worker's session is redone at once rather than at the run's tail; within each, the longest
first (`expected_s`, the seconds the session streams: longest-processing-time-first keeps
the run's tail to about one short session), ties by session id. The claim index (run_id,
status, expected_s DESC, session_id) hands each kind's first over without sorting.

On PostgreSQL a claim is one statement: an UPDATE whose FROM picks the session with
`FOR UPDATE SKIP LOCKED` (racing claimers take different rows) and that RETURNs the row
taken and the status it had. SQLite has no row locks (its writers take turns), so there a
claim selects the candidate and takes it with an optimistic UPDATE that names the status
and attempt it saw.

Statements are built once, with bound parameters: a claim is a few milliseconds of work
and building SQLAlchemy expressions anew would be a good part of it.
"""

from __future__ import annotations

import functools

from sqlalchemy import Select, Update, bindparam, case, literal, select, union_all, update
from sqlalchemy.sql.elements import ColumnElement

from streameval.core.store import models
from streameval.core.store.clock import store_now
from streameval.core.store.sessions import reset_values

# Runs whose sessions workers take: a run being created has all of its sessions already.
CLAIMABLE_RUN_STATUSES = ("created", "running", "interrupted")
# Expired leases, then pending sessions.
CLAIM_ORDER = (True, False)


def claimable_runs() -> Select:
    runs = models.runs
    return (
        select(runs.c.run_id)
        .where(runs.c.status.in_(CLAIMABLE_RUN_STATUSES))
        .order_by(runs.c.created_at, runs.c.run_id)
    )


def _claimable(expired: bool, *columns: ColumnElement) -> Select:
    """`columns` of the run's pending sessions (with `expired`, its running ones whose lease
    ran out by the database's clock) in claim order, if the run takes claims."""
    sessions, runs = models.sessions, models.runs
    query = (
        select(*columns)
        .select_from(sessions)
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
    return query.order_by(sessions.c.expected_s.desc(), sessions.c.session_id)


@functools.cache
def upcoming(expired: bool) -> Select:
    """Whole rows of the first `b_limit` claimable sessions of one kind."""
    return _claimable(expired, models.sessions).limit(bindparam("b_limit"))


@functools.cache
def candidate(locking: bool) -> Select:
    """The session a claim takes: (run_id, session_id, status, attempt). `locking`
    (PostgreSQL) locks it, skipping rows other claimers hold locked."""
    table = models.sessions
    columns = (table.c.run_id, table.c.session_id, table.c.status, table.c.attempt)
    firsts = []
    for rank, expired in enumerate(CLAIM_ORDER):
        first = _claimable(expired, *columns, literal(rank).label("rank")).limit(1)
        if locking:
            first = first.with_for_update(skip_locked=True, of=table)
        firsts.append(select(first.cte(f"first_{rank}")))
    both = union_all(*firsts).subquery("candidates")
    return select(*(both.c[c.name] for c in columns)).order_by(both.c.rank).limit(1)


def _lease_values() -> dict[str, object]:
    return {
        "status": "running",
        "started_at": store_now(),
        "lease_owner": bindparam("b_owner"),
        "lease_expires_at": store_now(bindparam("b_lease_s")),
        "host": bindparam("b_host"),
        "worker_id": bindparam("b_owner"),
        "endpoint": bindparam("b_endpoint"),
    }


@functools.cache
def claim_in_one() -> Update:
    """PostgreSQL: take the first claimable session of run `b_run`, leased to the claimer;
    returns its row and `seen`, the status it had (`running`: an expired lease was
    stolen, a new attempt whose predecessor's events are to be deleted)."""
    table = models.sessions
    picked = candidate(True).subquery("picked")
    stolen = picked.c.status == "running"
    # A pending session has these cleared already; a stolen one starts afresh.
    values = {key: value for key, value in reset_values().items() if key != "attempt"}
    values.update(_lease_values())
    values["attempt"] = case((stolen, table.c.attempt + 1), else_=table.c.attempt)
    return (
        update(table)
        .where(table.c.run_id == picked.c.run_id, table.c.session_id == picked.c.session_id)
        .values(**values)
        .returning(*table.c, picked.c.status.label("seen"))
    )


@functools.cache
def take(stealing: bool) -> Update:
    """SQLite: take the session if it is still as the claimer saw it (status and attempt;
    a stolen one's lease still expired), leased to the claimer; returns its row."""
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
    values.update(_lease_values())
    return update(table).where(*seen).values(**values).returning(table)

"""A run has one owner at a time: the Core that drives it holds a lease in the store.

`streameval run` (and `run --resume`, and a run the control API starts) takes the run's
lease before touching its sessions and pushes it forward every third of the lease while the
run goes on; a second Core asking for the same run is refused with the owner's host, process
and how long ago it renewed, until the lease expires (its owner died without releasing it),
and then takes the run over (at once when the owner was on the same host and its process
is gone). The lease sits beside the session leases of store/queue.py:
scale-out workers lease sessions, not runs, so a Core resuming a run that workers share
leaves the sessions they hold alone (`sessions_to_reset`).

Acquiring is optimistic, the same way on SQLite and PostgreSQL: an insert when nobody owns
the run, or an update naming the expired deadline the claimer saw; of two racing Cores one
wins and the other reads the winner. Deadlines are the database's time (clock.py): a Core
whose clock is wrong neither sees a live lease as expired nor writes one already expired.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import delete, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from streameval.core.errors import CoreError
from streameval.core.store import models
from streameval.core.store.clock import store_now
from streameval.core.store.queue import WorkerIdentity
from streameval.core.store.store import SessionInfo, Store, StoreError


class StoreFileGone(StoreError):
    """The SQLite store file was deleted or replaced while a run wrote to it."""


class RunOwned(CoreError):
    """Another Core holds the run's lease and renewed it recently: it is alive."""


@dataclass(frozen=True)
class RunOwner:
    owner: str
    host: str
    pid: int
    renewed_at: datetime
    expires_at: datetime

    def describe(self, now: datetime) -> str:
        ago = max((now - self.renewed_at).total_seconds(), 0.0)
        left = max((self.expires_at - now).total_seconds(), 0.0)
        return (
            f"host {self.host} pid {self.pid} (renewed {ago:.0f}s ago; the lease expires in "
            f"{left:.0f}s if it stops renewing)"
        )


def _owner_row(run_id: str) -> object:
    """The run's owner row, with the database's time beside it (`now`)."""
    table = models.run_owners
    return select(table, store_now().label("now")).where(table.c.run_id == run_id)


def current_owner(store: Store, run_id: str) -> RunOwner | None:
    with store.transaction(f"cannot read the owner of run {run_id!r}") as conn:
        row = conn.execute(_owner_row(run_id)).first()
    if row is None:
        return None
    return RunOwner(row.owner, row.host, row.pid, row.renewed_at, row.expires_at)


def acquire_run(store: Store, run_id: str, identity: WorkerIdentity, lease_s: float) -> None:
    """Own `run_id` for `lease_s` seconds, or raise RunOwned naming the live owner.

    A lease that expired (its Core died) is taken over; one this identity holds is renewed."""
    table = models.run_owners
    values = {
        "owner": identity.worker_id,
        "host": identity.host,
        "pid": os.getpid(),
        "renewed_at": store_now(),
        "expires_at": store_now(lease_s),
    }
    for _ in range(5):  # a lost race re-reads the winner
        try:
            with store.transaction(f"cannot take over run {run_id!r}") as conn:
                row = conn.execute(_owner_row(run_id)).first()
                if row is None:
                    conn.execute(insert(table).values(run_id=run_id, **values))
                    return
                mine = row.owner == identity.worker_id
                if not mine and row.expires_at >= row.now and not _dead_here(row, identity):
                    owner = RunOwner(row.owner, row.host, row.pid, row.renewed_at, row.expires_at)
                    raise RunOwned(
                        f"run {run_id} is being run by another Core: {owner.describe(row.now)}; "
                        "wait for it to end, or stop it and resume once its lease expired"
                    )
                taken = conn.execute(
                    update(table)
                    .where(
                        table.c.run_id == run_id,
                        table.c.owner == row.owner,
                        table.c.expires_at == row.expires_at,
                    )
                    .values(**values)
                )
                if taken.rowcount == 1:
                    return
        except StoreError as exc:
            if not isinstance(exc.__cause__, IntegrityError):
                raise
    raise StoreError(f"cannot take over run {run_id!r}: other Cores keep racing for it")


def _dead_here(row: object, identity: WorkerIdentity) -> bool:
    """An owner on this very host whose process is gone (killed, crashed): its lease need not
    run out before the run is taken over. Elsewhere only the lease's expiry tells."""
    return row.host == identity.host and _process_gone(row.pid)


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, under another user
        return False
    return False


def _owner_dead_here(worker_id: str, identity: WorkerIdentity) -> bool:
    """A lease owner id (`host:pid:suffix`, worker.this_worker) naming a process of this host
    that is gone: its sessions are free at once, like its run lease."""
    parts = worker_id.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    return parts[0] == identity.host and _process_gone(int(parts[1]))


def renew_run(store: Store, run_id: str, identity: WorkerIdentity, lease_s: float) -> bool:
    """Push this Core's lease forward; False when it no longer holds the run."""
    table = models.run_owners
    with store.transaction(f"cannot renew the lease of run {run_id!r}") as conn:
        renewed = conn.execute(
            update(table)
            .where(table.c.run_id == run_id, table.c.owner == identity.worker_id)
            .values(renewed_at=store_now(), expires_at=store_now(lease_s))
        )
        return renewed.rowcount == 1


def release_run(store: Store, run_id: str, identity: WorkerIdentity) -> None:
    table = models.run_owners
    with store.transaction(f"cannot release run {run_id!r}") as conn:
        conn.execute(
            delete(table).where(table.c.run_id == run_id, table.c.owner == identity.worker_id)
        )


def held_elsewhere(session: SessionInfo, identity: WorkerIdentity, now: datetime) -> bool:
    """A running session another worker holds under a lease that has not expired at `now`
    (the store's clock, Store.clock): a scale-out worker is running it now, and a resume
    must not reset it. A lease whose owner was a process of this host that is gone (a
    SIGKILLed Core) holds nothing."""
    return (
        session.status == "running"
        and session.lease_owner is not None
        and session.lease_owner != identity.worker_id
        and session.lease_expires_at is not None
        and session.lease_expires_at >= now
        and not _owner_dead_here(session.lease_owner, identity)
    )


# --------------------------------------------------------------------------- the store file


@dataclass(frozen=True)
class StoreFile:
    """A SQLite store's file as the run opened it: deleting or replacing it while the Core
    holds it open loses every later write without any error, so the run checks it."""

    path: Path
    identity: tuple[int, int]

    @classmethod
    def of(cls, store: Store) -> StoreFile | None:
        url = make_url(store.engine.url)
        if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
            return None
        path = Path(url.database)
        try:
            stat = path.stat()
        except OSError:
            return None
        return cls(path, (stat.st_dev, stat.st_ino))

    def check(self) -> None:
        """Raise StoreError when the file is gone or another file took its place."""
        try:
            stat = self.path.stat()
        except OSError:
            raise StoreFileGone(
                f"the store file {self.path.name} was deleted during the run; "
                "events written since are lost"
            ) from None
        if (stat.st_dev, stat.st_ino) != self.identity:
            raise StoreFileGone(
                f"the store file {self.path.name} was replaced during the run; "
                "events written since are lost"
            )

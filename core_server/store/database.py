"""The database under a `Store`, which every part of it (runs.py, sessions.py, events.py,
analyses.py, endpoints.py) builds on: opening it, noticing its file vanish, retrying what
may pass, and the transactions every method runs in.

The store is checked, not trusted: a SQLite file deleted or replaced under an open store is
detected on every transaction (its device and inode) and raised as `StoreLost`.
"""

from __future__ import annotations

import functools
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self, TypeVar

from sqlalchemy import Connection, Engine, insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from streameval.core.store import models
from streameval.core.store.clock import store_now
from streameval.core.store.engine import sqlite_path, store_engine
from streameval.core.store.errors import StoreLost, is_transient, reason
from streameval.core.store.light import StoreError
from streameval.core.store.retry import retry_transient
from streameval.core.store.schema import check_schema, migrate

T = TypeVar("T")


class StoreDatabase:
    """Open (and migrate, unless `read_only`) the database of a store URL."""

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        try:
            parsed = make_url(url)
            self._display_url = parsed.render_as_string(hide_password=True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open store {url!r}: {reason(exc)}") from exc
        self._read_only = read_only
        self._opened = False  # connections are retried only once the store was opened
        self._file: Path | None = None
        self._identity: tuple[int, int] | None = None
        self._engine = self._open_engine(url)
        try:
            check_schema(self._engine, self._display_url) if read_only else migrate(self._engine)
        except (SQLAlchemyError, sqlite3.Error) as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open store {self._display_url}: {reason(exc)}") from exc
        except StoreError:
            self._engine.dispose()
            raise
        if parsed.drivername.startswith("sqlite"):
            self._file = sqlite_path(parsed.database)
            self._identity = self._file_identity()
        self._opened = True

    def _open_engine(self, url: str) -> Engine:
        try:
            return store_engine(url, self._read_only, lambda: self._opened)
        except (SQLAlchemyError, ImportError) as exc:  # ImportError: the driver is missing
            raise StoreError(f"cannot open store {self._display_url}: {reason(exc)}") from exc

    def _file_identity(self) -> tuple[int, int] | None:
        """(device, inode) of the SQLite file; None when it no longer exists."""
        if self._file is None:
            return None
        try:
            stat = os.stat(self._file)
        except FileNotFoundError:
            return None
        return stat.st_dev, stat.st_ino

    def check_present(self) -> None:
        """Raise StoreLost if the SQLite file opened was deleted or replaced since (a stat:
        cheap enough for every transaction). PostgreSQL stores are checked by their server."""
        if self._identity is None:
            return
        now = self._file_identity()
        if now == self._identity:
            return
        change = "deleted" if now is None else "replaced by another file"
        raise StoreLost(
            f"store {self._display_url} was {change} while open; what was written since is lost"
        )

    @property
    def read_only(self) -> bool:
        return self._read_only

    def retrying(self, call: Callable[[], T]) -> T:
        """`call()`, tried again while it raises a transient StoreError (retry_transient):
        every retried Store method goes through here. Only for calls safe to repeat."""
        return retry_transient(call)

    def clock(self) -> datetime:
        """The database's current time (clock.py): what lease deadlines are compared with."""
        return self.retrying(self._read_clock)

    def _read_clock(self) -> datetime:
        with self.transaction("cannot read the store's clock") as conn:
            return conn.execute(select(store_now())).scalar_one()

    @property
    def url(self) -> str:
        """The store URL with any password hidden (safe to print)."""
        return self._display_url

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for readers that need raw speed (the scorer) or own tables."""
        return self._engine

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self, what: str) -> Iterator[Connection]:
        """One transaction; database errors (constraints, lost server) become StoreError
        (`transient` set where a later try may succeed), a SQLite file deleted or replaced
        under the store StoreLost, checked before and after the transaction.

        Driver errors arrive unwrapped from COPY (PostgreSQL), and ValueError/TypeError
        from JSON encoding (NaN, objects JSON cannot hold) wherever SQLAlchemy does not wrap.
        """
        with self._store_errors(what), self._engine.begin() as conn:
            yield conn

    @contextmanager
    def autocommitted(self, what: str) -> Iterator[Connection]:
        """A connection whose statements each commit on their own: one round trip for a
        statement that needs no transaction around it (no BEGIN, no COMMIT). Errors as in
        `transaction`."""
        with self._store_errors(what), self._engine.connect() as conn:
            yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextmanager
    def _store_errors(self, what: str) -> Iterator[None]:
        driver_error = self._engine.dialect.loaded_dbapi.Error
        self.check_present()
        try:
            yield
        except (SQLAlchemyError, driver_error, ValueError, TypeError) as exc:
            self.check_present()  # a vanished file explains the error better than SQLite
            raise StoreError(f"{what}: {reason(exc)}", transient=is_transient(exc)) from exc
        # A file deleted during the transaction took the commit with it.
        self.check_present()

    # --- what the parts share -----------------------------------------------------------------

    @staticmethod
    def _run_exists(conn: Connection, run_id: str) -> bool:
        table = models.runs
        return (
            conn.execute(select(table.c.run_id).where(table.c.run_id == run_id)).first() is not None
        )

    def _require_run(self, conn: Connection, run_id: str) -> None:
        if not self._run_exists(conn, run_id):
            raise self._unknown_run(run_id)

    def _unknown_run(self, run_id: str) -> StoreError:
        return StoreError(f"unknown run id {run_id!r} in store {self._display_url}")

    def _insert_for_run(
        self, run_id: str, table: Any, rows: list[dict[str, Any]], what: str
    ) -> None:
        with self.transaction(f"cannot add {what} to run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            if rows:
                conn.execute(insert(table), rows)


def retried(method: Callable[..., T]) -> Callable[..., T]:
    """A Store method that is safe to repeat, retried on transient errors (Store.retrying)."""

    @functools.wraps(method)
    def retried(self: StoreDatabase, *args: Any, **kwargs: Any) -> T:
        return self.retrying(lambda: method(self, *args, **kwargs))

    return retried


def check_status(status: str, allowed: tuple[str, ...], what: str) -> None:
    if status not in allowed:
        raise StoreError(f"invalid {what} status {status!r}; expected one of {', '.join(allowed)}")


def utc_now() -> datetime:
    """This host's time, for what a timestamp only records (a run's creation, a session's
    end); lease deadlines use the database's (clock.py)."""
    return datetime.now(UTC)

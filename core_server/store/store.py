"""The event store: runs, their records and sessions, and every recorded event.

One synchronous SQLAlchemy engine over SQLite (the default, a single file in WAL mode) or
PostgreSQL (`postgresql+psycopg://...`), with the same code for both. The Core writes through
one writer task (see writer.py) that calls this class via `asyncio.to_thread`; the scorer only
reads. Opening a store read-write migrates it to the newest schema with Alembic; opening it
read-only (`Store(url, read_only=True)`: scoring, the results API, exports, `streameval
runs`) never writes: no migration, no WAL or journal file, SQLite opened with `mode=ro`
(`immutable=1` on media where even the lock files cannot be made), PostgreSQL in read-only
transactions. Only migrating imports Alembic (a tenth of a second): a read-only store's
schema version is checked against the migration files' names.

The store is checked, not trusted: a SQLite file deleted or replaced under an open store is
detected on every transaction (its device and inode) and raised as `StoreLost`. Errors the
database may recover from (a PostgreSQL restart, a reset connection, SQLite's "database is
locked") are `StoreError`s with `transient=True`; the reading and status methods, and
`append_events`, retry them for up to `RETRY_BUDGET_S` (backoff `RETRY_FIRST_DELAY_S`
doubling to `RETRY_MAX_DELAY_S`), and a PostgreSQL connection that cannot be made is
retried for as long while the store is open.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    null,
    select,
)
from sqlalchemy import text as sql_text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool, StaticPool

from streameval.core.store import models
from streameval.core.store.light import (
    MIGRATIONS_DIR,
    RunInfo,
    SessionInfo,
    StoreError,
    check_schema_version,
    connect_read_only,
)
from streameval.events import Event, EventPayload, PayloadError, read_payload

DEFAULT_DB_NAME = "streameval.db"
# Any constant works: it only has to be the same for every process migrating one database.
_MIGRATION_LOCK_KEY = 0x5E7A_0001
_VERSIONED_PACKAGES = (
    "streameval",
    "av",
    "sqlalchemy",
    "websockets",
    "numpy",
    "pydantic",
    "fastapi",
)


# How long a transient database error (a PostgreSQL restart, a reset connection, a locked
# SQLite file) is retried before it counts as a failure, and the backoff between tries.
RETRY_BUDGET_S = 60.0
RETRY_FIRST_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 2.0
# PostgreSQL SQLSTATEs that a later try may not meet: connection exceptions (class 08), the
# server shutting down or starting (57P01-57P03), serialization failure and deadlock.
_TRANSIENT_SQLSTATES = ("08", "57P01", "57P02", "57P03", "40001", "40P01")
_TRANSIENT_SQLITE = ("database is locked", "database table is locked")
T = TypeVar("T")


def record_rows(run_id: str, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `run_records` rows of a run's records (KeyError: a record lacks a column)."""
    return [
        {
            "run_id": run_id,
            "record_id": rec["record_id"],
            "task": rec["task"],
            "task_type": rec["task_type"],
            "source_benchmark": rec["source_benchmark"],
            "video_path": rec["video_path"],
            "record": rec,
        }
        for rec in records
    ]


class StoreLost(StoreError):
    """The store this process opened is gone: its SQLite file was deleted or replaced (what
    was written since went into the removed file, or would). Never transient."""


@dataclass(frozen=True)
class DeletedRuns:
    """What `Store.delete_runs` removed: the runs as they were, and the rows of each table."""

    runs: list[RunInfo]
    rows: dict[str, int]


# Every table holding rows of runs, those that refer to others first (the order to delete).
RUN_TABLES = tuple(
    table for table in reversed(models.metadata.sorted_tables) if "run_id" in table.c
)


@dataclass(frozen=True)
class AdapterEndpoint:
    """An adapter endpoint registered with the control API under a name runs can use."""

    name: str
    url: str
    concurrency: int
    registered_at: datetime


def canonical_json(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, UTF-8, no NaN/Infinity."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()


def library_versions() -> dict[str, str]:
    """Versions that can change results, read from package metadata (nothing is imported)."""
    versions = {"python": platform.python_version()}
    for name in _VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def default_store_url(directory: Path) -> str:
    return f"sqlite:///{Path(directory) / DEFAULT_DB_NAME}"


def _now() -> datetime:
    return datetime.now(UTC)


def _reason(exc: BaseException) -> str:
    """The driver's own message (first line), without SQLAlchemy's statement dump."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def _set_sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the scorer read while the Core writes; NORMAL is durable enough in WAL mode and
    # much faster; the busy timeout makes a second process wait instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


# Compact, strict JSON for every JSON column: NaN would pass SQLite but fail PostgreSQL.
_json_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def _is_transient(exc: BaseException) -> bool:
    """Whether the database may recover by itself from this error (see _TRANSIENT_*)."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None) or exc
    sqlstate = getattr(orig, "sqlstate", None)
    if sqlstate is not None:
        return sqlstate.startswith(_TRANSIENT_SQLSTATES)
    if isinstance(orig, sqlite3.OperationalError):
        return str(orig).startswith(_TRANSIENT_SQLITE)
    # psycopg's errors without a SQLSTATE are connection failures (refused, reset, closed).
    return type(orig).__module__.startswith("psycopg") and type(orig).__name__ in (
        "OperationalError",
        "InterfaceError",
    )


def _sqlite_path(database: str | None) -> Path | None:
    """The SQLite file of a URL's database part; None for an in-memory database."""
    if database in (None, "", ":memory:"):
        return None
    if database.startswith("file:"):
        path = urllib.parse.urlsplit(database).path
        return None if path in ("", ":memory:") else Path(path)
    return Path(database)


def _create_engine(
    url: str, read_only: bool = False, connect_retry: Callable[[], bool] = bool
) -> Engine:
    """An engine for `url`. `connect_retry()` says whether a PostgreSQL connection that
    cannot be made is retried (for RETRY_BUDGET_S) instead of failing at once."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":  # no driver named: use the installed one
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername == "postgresql+psycopg":
        # Fail within seconds on an unreachable host instead of waiting out TCP timeouts.
        connect_args: dict[str, Any] = (
            {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
        )
        if read_only:  # the server refuses any write in this session's transactions
            connect_args["options"] = "-c default_transaction_read_only=on"
        engine = create_engine(
            parsed, json_serializer=_json_dumps, pool_pre_ping=True, connect_args=connect_args
        )
        event.listen(engine, "do_connect", _retrying_connect(connect_retry))
        return engine
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite"):
        raise StoreError(
            f"cannot open store {parsed.render_as_string(hide_password=True)}: "
            "only sqlite:/// and postgresql+psycopg:// URLs are supported"
        )
    path = _sqlite_path(parsed.database)
    if read_only and path is not None:
        return _read_only_sqlite_engine(path)
    # An in-memory database lives in one connection: share it across the writer's threads.
    extra: dict[str, Any] = (
        {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}}
        if path is None
        else {}
    )
    engine = create_engine(parsed, json_serializer=_json_dumps, **extra)
    event.listen(engine, "connect", _set_sqlite_pragmas)
    return engine


def _retrying_connect(enabled: Callable[[], bool]) -> Callable[..., Any]:
    """A `do_connect` hook: while the server restarts, new connections are retried with
    backoff for RETRY_BUDGET_S instead of failing the store call that needed one."""

    def connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        deadline = time.monotonic() + RETRY_BUDGET_S
        delay = RETRY_FIRST_DELAY_S
        while True:
            try:
                return dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.OperationalError:
                if not enabled() or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)

    return connect


def _read_only_sqlite_engine(path: Path) -> Engine:
    """SQLite opened so that nothing is ever written (light.connect_read_only). Each
    transaction gets a new connection (NullPool: opening a file is cheap), opened as the
    file is at that moment."""
    if not path.is_file():
        raise StoreError(f"cannot open store {path} read-only: the file does not exist")
    return create_engine(
        "sqlite://",
        creator=lambda: connect_read_only(path),
        poolclass=NullPool,
        json_serializer=_json_dumps,
    )


def _table_names(conn: Connection) -> list[str]:
    """The table names of the connected database."""
    return list(inspect(conn).get_table_names())


def _run_info(row: Row[Any]) -> RunInfo:
    return RunInfo(**row._asdict())  # the columns are named like the fields


def _session_info(row: Row[Any]) -> SessionInfo:
    return SessionInfo(**row._asdict())


def _adapter_endpoint(row: Row[Any]) -> AdapterEndpoint:
    return AdapterEndpoint(**row._asdict())


def _payload_json(payload: EventPayload) -> str:
    """A payload's JSON text, serialised by its model in one call (no dict in between)."""
    return payload.__pydantic_serializer__.to_json(payload).decode()


# An events row in the column order of `_EVENT_COLUMNS`: run_id, session_id, seq, kind,
# runtime_ns, video_t and the payload's JSON text.
EventRow = tuple[str, str, int, str, int, float | None, str]


def event_row(ev: Event) -> EventRow:
    """The row that stores an event."""
    return (
        ev.run_id,
        ev.session_id,
        ev.seq,
        ev.kind.value,
        ev.runtime_ns,
        ev.video_t,
        _payload_json(ev.payload),
    )


def _stored_event(row: Row[Any]) -> Event:
    """An events row as a typed event; a payload that does not match its kind is named."""
    try:
        payload = read_payload(row.kind, row.payload)
    except PayloadError as exc:
        raise StoreError(
            f"run {row.run_id!r} session {row.session_id!r} event {row.seq}: {exc}"
        ) from None
    return Event(
        row.run_id, row.session_id, row.seq, row.kind, row.runtime_ns, row.video_t, payload
    )


# Well under SQLite's smallest limit on a statement's parameters (999 before 3.32).
_SQLITE_MAX_PARAMETERS = 900
_EVENT_COLUMNS = "run_id, session_id, seq, kind, runtime_ns, video_t, payload"
_COPY_EVENTS = f"COPY events ({_EVENT_COLUMNS}) FROM STDIN"
_EVENT_WIDTH = 7  # columns of an events row
_EVENT_ROW = "(" + ", ".join("?" * _EVENT_WIDTH) + ")"
_ROWS_PER_INSERT = _SQLITE_MAX_PARAMETERS // _EVENT_WIDTH


def _copy_events(conn: Connection, rows: Sequence[EventRow]) -> None:
    """PostgreSQL bulk load: COPY takes one round trip per batch where executemany takes
    many; measured under a busy event loop it stores batches 3-5x faster."""
    cursor = conn.connection.driver_connection.cursor()
    with cursor.copy(_COPY_EVENTS) as copy:
        for row in rows:
            copy.write_row(row)


def _insert_events(conn: Connection, rows: Sequence[EventRow]) -> None:
    """SQLite: multi-row INSERTs of plain tuples on the driver's cursor, in the transaction.

    The driver lets go of the interpreter lock around every statement it steps; one
    statement per row (executemany) handed the lock back and forth with the sessions'
    event loop a thousand times a batch, which cost the loop five times the insert itself.
    SQLAlchemy's per-row parameter handling cost more than the insert too."""
    cursor = conn.connection.driver_connection.cursor()
    try:
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            cursor.execute(_insert_rows(len(chunk)), [value for row in chunk for value in row])
    finally:
        cursor.close()


@functools.cache
def _insert_rows(count: int) -> str:
    return f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES " + ", ".join([_EVENT_ROW] * count)


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


def _sessions_not_held(conn: Connection, rows: Sequence[EventRow], owner: str) -> set[str]:
    """The batch's sessions whose lease `owner` does not hold. On PostgreSQL the held rows
    stay share-locked until the batch commits, so no claim can reset them in between."""
    table = models.sessions
    wanted = {(row[0], row[1]) for row in rows}
    held: set[tuple[str, str]] = set()
    for run_id in {run for run, _ in wanted}:
        ids = [session for run, session in wanted if run == run_id]
        if conn.dialect.name == "sqlite":
            held.update((run_id, session) for session in _held_sqlite(conn, run_id, ids, owner))
            continue
        query = select(table.c.session_id).where(
            table.c.run_id == run_id, table.c.session_id.in_(ids), table.c.lease_owner == owner
        )
        held.update(
            (run_id, row.session_id) for row in conn.execute(query.with_for_update(read=True))
        )
    return {session for run, session in wanted - held}


def _held_sqlite(conn: Connection, run_id: str, ids: list[str], owner: str) -> list[str]:
    """The driver's query for the sessions of `ids` that `owner` holds: built by SQLAlchemy
    for every batch, the same query cost as much as storing the batch."""
    held: list[str] = []
    cursor = conn.connection.driver_connection.cursor()
    try:
        for start in range(0, len(ids), _SQLITE_MAX_PARAMETERS):
            chunk = ids[start : start + _SQLITE_MAX_PARAMETERS]
            marks = ", ".join("?" * len(chunk))
            cursor.execute(
                "SELECT session_id FROM sessions WHERE run_id = ? AND lease_owner = ? "
                f"AND session_id IN ({marks})",
                (run_id, owner, *chunk),
            )
            held.extend(session for (session,) in cursor.fetchall())
    finally:
        cursor.close()
    return held


def _stored_keys(conn: Connection, rows: Sequence[EventRow]) -> set[tuple[str, str, int]]:
    """Which of these rows' (run, session, seq) keys are already stored."""
    table = models.events
    spans: dict[tuple[str, str], list[int]] = {}
    for run_id, session_id, seq, *_ in rows:
        spans.setdefault((run_id, session_id), []).append(seq)
    stored: set[tuple[str, str, int]] = set()
    for (run_id, session_id), seqs in spans.items():
        query = select(table.c.seq).where(
            table.c.run_id == run_id,
            table.c.session_id == session_id,
            table.c.seq.between(min(seqs), max(seqs)),
        )
        stored.update((run_id, session_id, seq) for seq in conn.execute(query).scalars())
    return stored


def _runs_named(run_ids: Sequence[str]) -> str:
    return ", ".join(f"run {run_id!r}" for run_id in run_ids)


def _refuse_runs_in_progress(conn: Connection, run_ids: list[str]) -> None:
    """StoreError naming a run whose Core or one of whose workers still holds a lease."""
    now = _now()
    owners = models.run_owners
    owner = conn.execute(
        select(owners).where(owners.c.run_id.in_(run_ids), owners.c.expires_at > now)
    ).first()
    if owner is not None:
        holder = f"a Core on host {owner.host} (pid {owner.pid})"
        raise _in_progress(owner.run_id, holder, owner.expires_at)
    sessions = models.sessions
    held = conn.execute(
        select(sessions).where(sessions.c.run_id.in_(run_ids), sessions.c.lease_expires_at > now)
    ).first()
    if held is not None:
        holder = f"worker {held.worker_id} on host {held.host} (session {held.session_id!r})"
        raise _in_progress(held.run_id, holder, held.lease_expires_at)


def _in_progress(run_id: str, holder: str, until: datetime) -> StoreError:
    return StoreError(
        f"run {run_id!r} is in progress: {holder} holds it until "
        f"{until.isoformat(timespec='seconds')}; stop it first, or add --force to delete it "
        "anyway: nothing deleted"
    )


def _check_status(status: str, allowed: tuple[str, ...], what: str) -> None:
    if status not in allowed:
        raise StoreError(f"invalid {what} status {status!r}; expected one of {', '.join(allowed)}")


def _retried(method: Callable[..., T]) -> Callable[..., T]:
    """A Store method that is safe to repeat, retried on transient errors (Store.retrying)."""

    @functools.wraps(method)
    def retried(self: Store, *args: Any, **kwargs: Any) -> T:
        return self.retrying(lambda: method(self, *args, **kwargs))

    return retried


class Store:
    """Open (and migrate) a store by URL; every method is one short transaction.

    `read_only=True` opens it for reading only (scoring, results API, exports): nothing is
    migrated or written, and a store of another schema version is refused with one line."""

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        try:
            parsed = make_url(url)
            self._display_url = parsed.render_as_string(hide_password=True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open store {url!r}: {_reason(exc)}") from exc
        self._read_only = read_only
        self._opened = False  # connections are retried only once the store was opened
        self._file: Path | None = None
        self._identity: tuple[int, int] | None = None
        self._engine = self._open_engine(url)
        try:
            self._check_schema() if read_only else self._migrate()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open store {self._display_url}: {_reason(exc)}") from exc
        except StoreError:
            self._engine.dispose()
            raise
        if parsed.drivername.startswith("sqlite"):
            self._file = _sqlite_path(parsed.database)
            self._identity = self._file_identity()
        self._opened = True

    def _open_engine(self, url: str) -> Engine:
        try:
            return _create_engine(url, self._read_only, lambda: self._opened)
        except (SQLAlchemyError, ImportError) as exc:  # ImportError: the driver is missing
            raise StoreError(f"cannot open store {self._display_url}: {_reason(exc)}") from exc

    def _migrate(self) -> None:
        from alembic import command
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
        with self._engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                # Several Core workers may open one fresh database at once: one migrates.
                conn.execute(
                    sql_text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY}
                )
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def _check_schema(self) -> None:
        """A read-only store must already have this streameval's schema: it cannot migrate."""
        with self._engine.connect() as conn:
            version = None
            if "alembic_version" in _table_names(conn):
                version = conn.execute(sql_text("SELECT version_num FROM alembic_version")).scalar()
        check_schema_version(self._display_url, version)

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
        """`call()`, tried again while it raises a transient StoreError, for at most
        RETRY_BUDGET_S with backoff. Only for calls that are safe to repeat."""
        deadline = time.monotonic() + RETRY_BUDGET_S
        delay = RETRY_FIRST_DELAY_S
        while True:
            try:
                return call()
            except StoreError as exc:
                if not exc.transient or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)

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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- runs -------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        benchmark: str,
        config: dict[str, Any],
        conditions: dict[str, Any] | None = None,
    ) -> RunInfo:
        info = RunInfo(
            run_id=run_id,
            created_at=_now(),
            status="created",
            benchmark=benchmark,
            config=config,
            config_hash=config_hash(config),
            versions=library_versions(),
            conditions=dict(conditions or {}),
            finished_at=None,
        )
        with self.transaction(f"cannot create run {run_id!r}") as conn:
            if self._run_exists(conn, run_id):
                raise StoreError(f"run {run_id!r} already exists in {self._display_url}")
            conn.execute(insert(models.runs).values(**asdict(info)))
        return info

    def set_run_status(self, run_id: str, status: str) -> None:
        _check_status(status, models.RUN_STATUSES, "run")
        values: dict[str, Any] = {"status": status}
        if status in ("finished", "interrupted", "failed"):
            values["finished_at"] = _now()
        self._update_run(run_id, values)

    def update_run_conditions(self, run_id: str, conditions: dict[str, Any]) -> None:
        self._update_run(run_id, {"conditions": conditions})

    @_retried
    def _update_run(self, run_id: str, values: dict[str, Any]) -> None:
        with self.transaction(f"cannot update run {run_id!r}") as conn:
            table = models.runs
            result = conn.execute(table.update().where(table.c.run_id == run_id).values(**values))
            if result.rowcount == 0:
                raise self._unknown_run(run_id)

    @_retried
    def get_run(self, run_id: str) -> RunInfo:
        with self.transaction(f"cannot read run {run_id!r}") as conn:
            row = conn.execute(select(models.runs).where(models.runs.c.run_id == run_id)).first()
        if row is None:
            raise self._unknown_run(run_id)
        return _run_info(row)

    @_retried
    def list_runs(self) -> list[RunInfo]:
        table = models.runs
        with self.transaction("cannot list runs") as conn:
            rows = conn.execute(
                select(table).order_by(table.c.created_at.desc(), table.c.run_id.desc())
            )
            return [_run_info(row) for row in rows]

    @_retried
    def runs_to_delete(self, run_ids: Sequence[str], *, force: bool = False) -> list[RunInfo]:
        """The runs `delete_runs` would delete, or the StoreError it would raise (so that a
        command can ask for confirmation first)."""
        with self.transaction(f"cannot read {_runs_named(run_ids)}") as conn:
            return self._deletable(conn, run_ids, force)

    def delete_runs(self, run_ids: Sequence[str], *, force: bool = False) -> DeletedRuns:
        """Delete runs with every row that belongs to them, all in one transaction.

        Nothing is deleted when an id is unknown, or when a run is in progress (a Core's
        run lease or a worker's session lease has not expired) unless `force`. What runs
        share is left alone: registered adapter endpoints and the judge's verdict cache
        (keyed by question and answer, not by run)."""
        with self.transaction(f"cannot delete {_runs_named(run_ids)}") as conn:
            infos = self._deletable(conn, run_ids, force)
            ids = [info.run_id for info in infos]
            rows = {
                table.name: conn.execute(delete(table).where(table.c.run_id.in_(ids))).rowcount
                for table in RUN_TABLES
            }
        return DeletedRuns(infos, rows)

    def _deletable(self, conn: Connection, run_ids: Sequence[str], force: bool) -> list[RunInfo]:
        ids = list(dict.fromkeys(run_ids))  # each once, in the order given
        table = models.runs
        found = {
            row.run_id: _run_info(row)
            for row in conn.execute(select(table).where(table.c.run_id.in_(ids)))
        }
        unknown = [run_id for run_id in ids if run_id not in found]
        if unknown:
            names = ", ".join(repr(run_id) for run_id in unknown)
            plural = "s" if len(unknown) > 1 else ""
            raise StoreError(
                f"unknown run id{plural} {names} in store {self._display_url}: nothing deleted"
            )
        if not force:
            _refuse_runs_in_progress(conn, ids)
        return [found[run_id] for run_id in ids]

    # --- records and sessions -----------------------------------------------------------------

    def add_records(self, run_id: str, records: Sequence[dict[str, Any]]) -> None:
        try:
            rows = record_rows(run_id, records)
        except KeyError as exc:
            raise StoreError(
                f"cannot add records to run {run_id!r}: a record has no {exc} field"
            ) from exc
        self._insert_for_run(run_id, models.run_records, rows, "records")

    @_retried
    def records(self, run_id: str) -> list[dict[str, Any]]:
        table = models.run_records
        with self.transaction(f"cannot read records of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table.c.record).where(table.c.run_id == run_id).order_by(table.c.record_id)
            )
            return [row.record for row in rows]

    def add_sessions(self, run_id: str, sessions: Sequence[tuple[str, list[str]]]) -> None:
        rows = [
            {
                "run_id": run_id,
                "session_id": session_id,
                "record_ids": list(record_ids),
                "status": "pending",
                "attempt": 0,
            }
            for session_id, record_ids in sessions
        ]
        self._insert_for_run(run_id, models.sessions, rows, "sessions")

    def _insert_for_run(
        self, run_id: str, table: Any, rows: list[dict[str, Any]], what: str
    ) -> None:
        with self.transaction(f"cannot add {what} to run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            if rows:
                conn.execute(insert(table), rows)

    @_retried
    def sessions(self, run_id: str) -> list[SessionInfo]:
        table = models.sessions
        with self.transaction(f"cannot read sessions of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table).where(table.c.run_id == run_id).order_by(table.c.session_id)
            )
            return [_session_info(row) for row in rows]

    @_retried
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
        _check_status(status, models.SESSION_STATUSES, "session")
        values: dict[str, Any] = {"status": status}
        if status == "running":
            values["started_at"] = _now()
        elif status in ("finished", "failed"):
            values["finished_at"] = _now()
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

    # --- events ---------------------------------------------------------------------------------

    def append_events(self, events: Sequence[Event], owner: str | None = None) -> set[str]:
        """Insert a batch in one transaction: all of it is stored, or none of it.

        A transient error is retried (Store.retrying); as the failed try may have committed
        (a connection lost during COMMIT), a retry skips the events already stored, so each
        is stored exactly once. With `owner`, events of sessions whose lease that worker no
        longer holds are dropped (their session was given to another attempt); returns those
        sessions."""
        return self.append_rows([event_row(event) for event in events], owner)

    def append_rows(self, rows: Sequence[EventRow], owner: str | None = None) -> set[str]:
        """`append_events` for events already turned into rows: `event_row`, or a session's
        `Recorder`, whose rows the Core's event writer stores (the Recorder validates every
        payload but frame_sent's and frame_ack's, which it writes from typed values)."""
        if not rows:
            return set()
        uncertain = False

        def attempt() -> set[str]:
            nonlocal uncertain
            try:
                return self._append_rows(rows, owner, skip_stored=uncertain)
            except StoreError as exc:
                uncertain = uncertain or exc.transient
                raise

        return self.retrying(attempt)

    def _append_rows(
        self, rows: Sequence[EventRow], owner: str | None, skip_stored: bool
    ) -> set[str]:
        (run_id, first, first_seq, *_), (_, last, last_seq, *_) = rows[0], rows[-1]
        what = (
            f"cannot append {len(rows)} events of run {run_id!r} (session {first!r} seq "
            f"{first_seq} to session {last!r} seq {last_seq})"
        )
        lost: set[str] = set()
        with self.transaction(what) as conn:
            if owner is not None:
                lost = _sessions_not_held(conn, rows, owner)
                rows = [row for row in rows if row[1] not in lost]
            if skip_stored:
                stored = _stored_keys(conn, rows)
                rows = [row for row in rows if row[:3] not in stored]
            if not rows:
                return lost
            if conn.dialect.name == "postgresql":
                _copy_events(conn, rows)
            else:
                _insert_events(conn, rows)
        return lost

    def iter_events(
        self, run_id: str, session_id: str | None = None, batch: int = 5000
    ) -> Iterator[Event]:
        """Events ordered by (session_id, seq), fetched `batch` rows at a time."""
        table = models.events
        query = (
            select(table).where(table.c.run_id == run_id).order_by(table.c.session_id, table.c.seq)
        )
        if session_id is not None:
            query = query.where(table.c.session_id == session_id)
        with self.transaction(f"cannot read events of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            if session_id is not None:
                self._require_session(conn, run_id, session_id)
            for row in conn.execution_options(yield_per=batch).execute(query):
                yield _stored_event(row)

    @_retried
    def count_events(self, run_id: str) -> int:
        table = models.events
        with self.transaction(f"cannot count events of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            return conn.execute(
                select(func.count()).select_from(table).where(table.c.run_id == run_id)
            ).scalar_one()

    # --- analyses of a run ------------------------------------------------------------------

    def put_analysis(self, run_id: str, name: str, payload: dict[str, Any]) -> None:
        """Store (or replace) the analysis `name` of a run: a causality audit's verdict, a
        capacity search's curve."""
        table = models.run_analyses
        with self.transaction(f"cannot store analysis {name!r} of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            where = (table.c.run_id == run_id) & (table.c.name == name)
            conn.execute(delete(table).where(where))
            row = {"run_id": run_id, "name": name, "created_at": _now(), "payload": payload}
            conn.execute(insert(table).values(**row))

    @_retried
    def analyses(self, run_id: str) -> dict[str, dict[str, Any]]:
        """The analyses stored with a run, by name (empty when it has none)."""
        table = models.run_analyses
        with self.transaction(f"cannot read analyses of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table.c.name, table.c.payload)
                .where(table.c.run_id == run_id)
                .order_by(table.c.name)
            )
            return {row.name: row.payload for row in rows}

    # --- adapter endpoints ------------------------------------------------------------------

    def register_adapter_endpoint(self, name: str, url: str, concurrency: int) -> AdapterEndpoint:
        """Store an endpoint under `name`, replacing one already registered under it."""
        endpoint = AdapterEndpoint(name, url, concurrency, registered_at=_now())
        table = models.adapter_endpoints
        # Delete then insert in one transaction: an upsert is spelled differently on SQLite
        # and PostgreSQL, and this spelling is the same on both.
        with self.transaction(f"cannot register adapter endpoint {name!r}") as conn:
            conn.execute(delete(table).where(table.c.name == name))
            conn.execute(insert(table).values(**asdict(endpoint)))
        return endpoint

    @_retried
    def adapter_endpoints(self) -> list[AdapterEndpoint]:
        table = models.adapter_endpoints
        with self.transaction("cannot list adapter endpoints") as conn:
            rows = conn.execute(select(table).order_by(table.c.name))
            return [_adapter_endpoint(row) for row in rows]

    # --- helpers --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, what: str) -> Iterator[Connection]:
        """One transaction; database errors (constraints, lost server) become StoreError
        (`transient` set where a later try may succeed), a SQLite file deleted or replaced
        under the store StoreLost, checked before and after the transaction.

        Driver errors arrive unwrapped from COPY (PostgreSQL), and ValueError/TypeError
        from JSON encoding (NaN, objects JSON cannot hold) wherever SQLAlchemy does not wrap.
        """
        driver_error = self._engine.dialect.loaded_dbapi.Error
        self.check_present()
        try:
            with self._engine.begin() as conn:
                yield conn
        except (SQLAlchemyError, driver_error, ValueError, TypeError) as exc:
            self.check_present()  # a vanished file explains the error better than SQLite
            raise StoreError(f"{what}: {_reason(exc)}", transient=_is_transient(exc)) from exc
        # A file deleted during the transaction took the commit with it.
        self.check_present()

    @staticmethod
    def _run_exists(conn: Connection, run_id: str) -> bool:
        table = models.runs
        return (
            conn.execute(select(table.c.run_id).where(table.c.run_id == run_id)).first() is not None
        )

    def _require_run(self, conn: Connection, run_id: str) -> None:
        if not self._run_exists(conn, run_id):
            raise self._unknown_run(run_id)

    @staticmethod
    def _require_session(conn: Connection, run_id: str, session_id: str) -> None:
        table = models.sessions
        query = select(table.c.session_id).where(
            table.c.run_id == run_id, table.c.session_id == session_id
        )
        if conn.execute(query).first() is None:
            raise StoreError(f"unknown session {session_id!r} in run {run_id!r}")

    def _unknown_run(self, run_id: str) -> StoreError:
        return StoreError(f"unknown run id {run_id!r} in store {self._display_url}")

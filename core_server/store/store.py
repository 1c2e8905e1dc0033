"""The event store: runs, their records and sessions, and every recorded event.

One synchronous SQLAlchemy engine over SQLite (the default, a single file in WAL mode) or
PostgreSQL (`postgresql+psycopg://...`), with the same code for both. The Core writes through
one writer task (see writer.py) that calls this class via `asyncio.to_thread`; the scorer only
reads. Opening a store migrates it to the newest schema with Alembic.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import (
    Connection,
    Engine,
    Row,
    create_engine,
    delete,
    event,
    func,
    insert,
    null,
    select,
)
from sqlalchemy import text as sql_text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from streameval.core.errors import CoreError
from streameval.core.store import models
from streameval.events import Event, PayloadError, read_payload

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
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


class StoreError(CoreError):
    """A store operation failed; the message names the run, session or URL involved."""


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    created_at: datetime
    status: models.RunStatus
    benchmark: str
    config: dict[str, Any]
    config_hash: str
    versions: dict[str, str]
    conditions: dict[str, Any]
    finished_at: datetime | None


@dataclass(frozen=True)
class SessionInfo:
    run_id: str
    session_id: str
    record_ids: list[str]
    status: models.SessionStatus
    attempt: int
    endpoint: str | None
    failure_stage: str | None
    failure_reason: str | None
    started_at: datetime | None
    finished_at: datetime | None
    # The adapter's hello (adapter, adapter_version, protocol, conditions) once it arrived.
    adapter: dict[str, Any] | None = None
    # For a failed session: infrastructure, adapter or input (events.failure_cause).
    failure_cause: str | None = None
    # The worker holding the session while it runs, and until when (docs/scale.md).
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    # Where the session ran: the worker's machine and id.
    host: str | None = None
    worker_id: str | None = None


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


def _create_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.drivername == "postgresql":  # no driver named: use the installed one
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername == "postgresql+psycopg":
        # Fail within seconds on an unreachable host instead of waiting out TCP timeouts.
        timeout = {} if "connect_timeout" in parsed.query else {"connect_timeout": 10}
        return create_engine(
            parsed, json_serializer=_json_dumps, pool_pre_ping=True, connect_args=timeout
        )
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite"):
        raise StoreError(
            f"cannot open store {parsed.render_as_string(hide_password=True)}: "
            "only sqlite:/// and postgresql+psycopg:// URLs are supported"
        )
    in_memory = parsed.database in (None, "", ":memory:")
    # An in-memory database lives in one connection: share it across the writer's threads.
    extra: dict[str, Any] = (
        {"poolclass": StaticPool, "connect_args": {"check_same_thread": False}} if in_memory else {}
    )
    engine = create_engine(parsed, json_serializer=_json_dumps, **extra)
    event.listen(engine, "connect", _set_sqlite_pragmas)
    return engine


def _run_info(row: Row[Any]) -> RunInfo:
    return RunInfo(**row._asdict())  # the columns are named like the fields


def _session_info(row: Row[Any]) -> SessionInfo:
    return SessionInfo(**row._asdict())


def _adapter_endpoint(row: Row[Any]) -> AdapterEndpoint:
    return AdapterEndpoint(**row._asdict())


def _event_row(event_: Event) -> dict[str, Any]:
    return {
        "run_id": event_.run_id,
        "session_id": event_.session_id,
        "seq": event_.seq,
        "kind": str(event_.kind),
        "runtime_ns": event_.runtime_ns,
        "video_t": event_.video_t,
        "payload": event_.payload.model_dump(mode="json"),
    }


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


_COPY_EVENTS = (
    "COPY events (run_id, session_id, seq, kind, runtime_ns, video_t, payload) FROM STDIN"
)


def _copy_events(conn: Connection, events: Sequence[Event]) -> None:
    """PostgreSQL bulk load: COPY takes one round trip per batch where executemany takes
    many; measured under a busy event loop it stores batches 3-5x faster."""
    cursor = conn.connection.driver_connection.cursor()
    with cursor.copy(_COPY_EVENTS) as copy:
        for ev in events:
            copy.write_row(
                (
                    ev.run_id,
                    ev.session_id,
                    ev.seq,
                    str(ev.kind),
                    ev.runtime_ns,
                    ev.video_t,
                    _json_dumps(ev.payload.model_dump(mode="json")),
                )
            )


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


def _sessions_not_held(conn: Connection, events: Sequence[Event], owner: str) -> set[str]:
    """The batch's sessions whose lease `owner` does not hold. On PostgreSQL the held rows
    stay share-locked until the batch commits, so no claim can reset them in between."""
    table = models.sessions
    wanted = {(event.run_id, event.session_id) for event in events}
    held: set[tuple[str, str]] = set()
    for run_id in {run for run, _ in wanted}:
        ids = [session for run, session in wanted if run == run_id]
        query = select(table.c.session_id).where(
            table.c.run_id == run_id, table.c.session_id.in_(ids), table.c.lease_owner == owner
        )
        if conn.dialect.name == "postgresql":
            query = query.with_for_update(read=True)
        held.update((run_id, row.session_id) for row in conn.execute(query))
    return {session for run, session in wanted - held}


def _check_status(status: str, allowed: tuple[str, ...], what: str) -> None:
    if status not in allowed:
        raise StoreError(f"invalid {what} status {status!r}; expected one of {', '.join(allowed)}")


class Store:
    """Open (and migrate) a store by URL; every method is one short transaction."""

    def __init__(self, url: str) -> None:
        try:
            self._display_url = make_url(url).render_as_string(hide_password=True)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open store {url!r}: {_reason(exc)}") from exc
        self._engine = self._open_engine(url)
        try:
            self._migrate()
        except SQLAlchemyError as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open store {self._display_url}: {_reason(exc)}") from exc

    def _open_engine(self, url: str) -> Engine:
        try:
            return _create_engine(url)
        except (SQLAlchemyError, ImportError) as exc:  # ImportError: the driver is missing
            raise StoreError(f"cannot open store {self._display_url}: {_reason(exc)}") from exc

    def _migrate(self) -> None:
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

    def _update_run(self, run_id: str, values: dict[str, Any]) -> None:
        with self.transaction(f"cannot update run {run_id!r}") as conn:
            table = models.runs
            result = conn.execute(table.update().where(table.c.run_id == run_id).values(**values))
            if result.rowcount == 0:
                raise self._unknown_run(run_id)

    def get_run(self, run_id: str) -> RunInfo:
        with self.transaction(f"cannot read run {run_id!r}") as conn:
            row = conn.execute(select(models.runs).where(models.runs.c.run_id == run_id)).first()
        if row is None:
            raise self._unknown_run(run_id)
        return _run_info(row)

    def list_runs(self) -> list[RunInfo]:
        table = models.runs
        with self.transaction("cannot list runs") as conn:
            rows = conn.execute(
                select(table).order_by(table.c.created_at.desc(), table.c.run_id.desc())
            )
            return [_run_info(row) for row in rows]

    # --- records and sessions -----------------------------------------------------------------

    def add_records(self, run_id: str, records: Sequence[dict[str, Any]]) -> None:
        try:
            rows = [
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
        except KeyError as exc:
            raise StoreError(
                f"cannot add records to run {run_id!r}: a record has no {exc} field"
            ) from exc
        self._insert_for_run(run_id, models.run_records, rows, "records")

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

    def sessions(self, run_id: str) -> list[SessionInfo]:
        table = models.sessions
        with self.transaction(f"cannot read sessions of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            rows = conn.execute(
                select(table).where(table.c.run_id == run_id).order_by(table.c.session_id)
            )
            return [_session_info(row) for row in rows]

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

        With `owner`, events of sessions whose lease that worker no longer holds are
        dropped (their session was given to another attempt); returns those sessions."""
        if not events:
            return set()
        first, last = events[0], events[-1]
        what = (
            f"cannot append {len(events)} events of run {first.run_id!r} (session "
            f"{first.session_id!r} seq {first.seq} to session {last.session_id!r} seq {last.seq})"
        )
        lost: set[str] = set()
        with self.transaction(what) as conn:
            if owner is not None:
                lost = _sessions_not_held(conn, events, owner)
                events = [event for event in events if event.session_id not in lost]
                if not events:
                    return lost
            if conn.dialect.name == "postgresql":
                _copy_events(conn, events)
            else:
                conn.execute(insert(models.events), [_event_row(ev) for ev in events])
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

    def count_events(self, run_id: str) -> int:
        table = models.events
        with self.transaction(f"cannot count events of run {run_id!r}") as conn:
            self._require_run(conn, run_id)
            return conn.execute(
                select(func.count()).select_from(table).where(table.c.run_id == run_id)
            ).scalar_one()

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

    def adapter_endpoints(self) -> list[AdapterEndpoint]:
        table = models.adapter_endpoints
        with self.transaction("cannot list adapter endpoints") as conn:
            rows = conn.execute(select(table).order_by(table.c.name))
            return [_adapter_endpoint(row) for row in rows]

    # --- helpers --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, what: str) -> Iterator[Connection]:
        """One transaction; database errors (constraints, lost server) become StoreError.

        Driver errors arrive unwrapped from COPY (PostgreSQL), and ValueError/TypeError
        from JSON encoding (NaN, objects JSON cannot hold) wherever SQLAlchemy does not wrap.
        """
        driver_error = self._engine.dialect.loaded_dbapi.Error
        try:
            with self._engine.begin() as conn:
                yield conn
        except (SQLAlchemyError, driver_error, ValueError, TypeError) as exc:
            raise StoreError(f"{what}: {_reason(exc)}") from exc

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

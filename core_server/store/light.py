"""The part of the store that needs neither SQLAlchemy nor Alembic: its errors, what a run
and a session are, the schema versions, and a SQLite store's runs read with the standard
library alone.

Importing SQLAlchemy costs a fifth of a second of CPU, more than the rest of `streameval
runs`: the listing reads a SQLite store through `sqlite_runs` (bench/bench_startup.py
measures it; tests/test_store.py checks that it reads what `Store.list_runs` reads).
The Store (store.py and the modules it is built from) builds on this module.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streameval.core.errors import CoreError

if TYPE_CHECKING:
    from streameval.core.store import models

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


class StoreError(CoreError):
    """A store operation failed; the message names the run, session or URL involved.

    `transient` is True when the database may recover by itself (a restart, a reset
    connection, a lock held too long): trying again later can succeed."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class OlderSchema(StoreError):
    """A store opened read-only has the schema of an older streameval: opening it
    read-write would migrate it."""


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
    # The video seconds the session streams (its expected duration; claims go longest first).
    expected_s: float = 0.0


def schema_versions() -> list[str]:
    """The schema's versions, oldest first: each migration file is named after its revision
    (`0008_drop_events_kind_index.py` makes revision 0008; tests/test_store.py checks them
    against Alembic's own history), so reading them needs no Alembic."""
    return sorted(
        path.name.partition("_")[0] for path in MIGRATIONS_DIR.glob("versions/[0-9]*_*.py")
    )


def check_schema_version(url: str, version: str | None) -> None:
    """Refuse, in one line, a store read-only whose schema is not this streameval's newest:
    None is a database without the version table (no store at all)."""
    versions = schema_versions()
    head = versions[-1]
    if version is None:
        raise StoreError(f"{url} is not a streameval store (no schema)")
    if version == head:
        return
    if version in versions:
        raise OlderSchema(
            f"store {url} has schema version {version}, older than this streameval's {head}; "
            "upgrade it once with `streameval runs --migrate` (which writes to it)"
        )
    raise StoreError(
        f"store {url} has schema version {version}, which this streameval (schema {head}) "
        "does not know: a newer streameval made it; upgrade to read it"
    )


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection to the SQLite file that never writes: not the database, not a WAL,
    journal or shared-memory file; opened as the file is at that moment:

    - a -wal file exists (a Core is writing, or did not close): `mode=ro`, which reads the
      WAL through the existing -shm file; on media where no -shm exists nor can be made,
      `immutable=1` (then only what was checkpointed into the database file is seen);
    - no -wal file: `immutable=1`, as `mode=ro` would create -wal and -shm files and leave
      them behind. Nobody writes then: a writer in WAL mode keeps its -wal while open.
    """
    quoted = urllib.parse.quote(str(path.resolve()))
    conn = None
    if Path(f"{path}-wal").exists():
        conn = sqlite3.connect(f"file:{quoted}?mode=ro", uri=True, check_same_thread=False)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:  # no -shm and none can be made
            conn.close()
            conn = None
    if conn is None:
        conn = sqlite3.connect(f"file:{quoted}?immutable=1", uri=True, check_same_thread=False)
    # No journal_mode: setting it is a write. query_only makes any write fail at once.
    conn.execute("PRAGMA busy_timeout=10000")
    conn.execute("PRAGMA query_only=ON")
    return conn


_RUN_COLUMNS = tuple(field.name for field in fields(RunInfo))
_JSON_COLUMNS = ("config", "versions", "conditions")
_TIME_COLUMNS = ("created_at", "finished_at")


def sqlite_runs(path: Path, url: str) -> list[RunInfo]:
    """`Store.list_runs` of a SQLite store, read-only: newest first. `url` names the store
    in errors; OlderSchema for a store that needs migrating first."""
    try:
        conn = connect_read_only(path)
        try:
            found = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"
            ).fetchone()
            stamp = None
            if found is not None:
                stamp = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            check_schema_version(url, stamp[0] if stamp else None)
            rows = conn.execute(
                f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs ORDER BY created_at DESC, run_id DESC"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {url}: {exc}") from exc
    return [_run_info(dict(zip(_RUN_COLUMNS, row, strict=True))) for row in rows]


def _run_info(row: dict[str, Any]) -> RunInfo:
    """A runs row as SQLAlchemy's column types would give it (models.py): JSON decoded,
    times UTC-aware (SQLite keeps them as ISO text without a zone)."""
    for column in _JSON_COLUMNS:
        row[column] = json.loads(row[column])
    for column in _TIME_COLUMNS:
        if row[column] is not None:
            row[column] = datetime.fromisoformat(row[column]).replace(tzinfo=UTC)
    return RunInfo(**row)

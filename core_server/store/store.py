"""The event store: runs, their records and sessions, and every recorded event.

One synchronous SQLAlchemy engine over SQLite (the default, a single file in WAL mode) or
PostgreSQL (`postgresql+psycopg://...`), with the same code for both. The Core writes through
one writer task (see writer.py) that calls this class via `asyncio.to_thread`; the scorer only
reads. Opening a store read-write migrates it to the newest schema with Alembic; opening it
read-only (`Store(url, read_only=True)`: scoring, the results API, exports, `streameval
runs`) never writes: no migration, no WAL or journal file, SQLite opened with `mode=ro`
(`immutable=1` on media where even the lock files cannot be made), PostgreSQL in read-only
transactions (engine.py, schema.py).

The store is checked, not trusted: a SQLite file deleted or replaced under an open store is
raised as `StoreLost` (database.py). Errors the database may recover from are `StoreError`s
with `transient=True` (errors.py); the reading and status methods, `create_run` and
`append_events` retry them for up to `RETRY_BUDGET_S` (retry.py).

`Store` is the one object callers hold. Each of its responsibilities is a part of its own,
with that responsibility's SQL, all sharing one database (database.StoreDatabase):

- runs.py: runs and their records (create, status, list, delete);
- sessions.py: the sessions of a run (queue.py leases them to workers);
- events.py: storing and reading events;
- analyses.py: results about a run as a whole;
- endpoints.py: adapter endpoints registered with the control API;
- videos.py: the digests a run's videos are bound to;
- suites.py: evaluation suites and their runs.

The names callers import with `Store` are imported here from their modules, so that
`from streameval.core.store.store import ...` keeps working.
"""

from __future__ import annotations

from streameval.core.store.analyses import StoreAnalyses
from streameval.core.store.endpoints import AdapterEndpoint, StoreEndpoints
from streameval.core.store.errors import StoreLost
from streameval.core.store.events import EventRow, StoreEvents, event_row
from streameval.core.store.light import MIGRATIONS_DIR, RunInfo, SessionInfo, StoreError
from streameval.core.store.locations import default_store_url
from streameval.core.store.runs import (
    RUN_TABLES,
    DeletedRuns,
    StoreRuns,
    config_hash,
    library_versions,
    record_rows,
)
from streameval.core.store.sessions import StoreSessions
from streameval.core.store.suites import StoreSuites, SuiteInfo
from streameval.core.store.videos import StoreVideos, video_rows

__all__ = [
    "MIGRATIONS_DIR",
    "RUN_TABLES",
    "AdapterEndpoint",
    "DeletedRuns",
    "EventRow",
    "RunInfo",
    "SessionInfo",
    "Store",
    "StoreError",
    "StoreLost",
    "SuiteInfo",
    "config_hash",
    "default_store_url",
    "event_row",
    "library_versions",
    "record_rows",
    "video_rows",
]


class Store(
    StoreRuns,
    StoreSessions,
    StoreEvents,
    StoreAnalyses,
    StoreEndpoints,
    StoreVideos,
    StoreSuites,
):
    """Open (and migrate) a store by URL; every method is one short transaction.

    `read_only=True` opens it for reading only (scoring, results API, exports): nothing is
    migrated or written, and a store of another schema version is refused with one line."""

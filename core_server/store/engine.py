"""The SQLAlchemy engine of a store URL: SQLite (a file in WAL mode, or in memory) or
PostgreSQL through psycopg, each set up for how the store uses it.

A read-only SQLite store is opened through light.connect_read_only (nothing is ever
written); a read-only PostgreSQL store runs read-only transactions. Every JSON column is
written compact and strict.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool, StaticPool

from streameval.core.store.light import StoreError, connect_read_only
from streameval.core.store.retry import retrying_connect

# Compact, strict JSON for every JSON column: NaN would pass SQLite but fail PostgreSQL.
_json_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def store_engine(
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
        event.listen(engine, "do_connect", retrying_connect(connect_retry))
        return engine
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite"):
        raise StoreError(
            f"cannot open store {parsed.render_as_string(hide_password=True)}: "
            "only sqlite:/// and postgresql+psycopg:// URLs are supported"
        )
    path = sqlite_path(parsed.database)
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


def sqlite_path(database: str | None) -> Path | None:
    """The SQLite file of a URL's database part; None for an in-memory database."""
    if database in (None, "", ":memory:"):
        return None
    if database.startswith("file:"):
        path = urllib.parse.urlsplit(database).path
        return None if path in ("", ":memory:") else Path(path)
    return Path(database)


def _set_sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the scorer read while the Core writes; NORMAL is durable enough in WAL mode and
    # much faster; the busy timeout makes a second process wait instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


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

"""What a database error means to the store: the one line it is reported with, whether a
later try may succeed (`transient`), and `StoreLost` for a store file gone while open.

`StoreError` itself lives in light.py, which commands import without SQLAlchemy.
"""

from __future__ import annotations

import sqlite3

from sqlalchemy.exc import DBAPIError

from streameval.core.store.light import StoreError

# PostgreSQL SQLSTATEs that a later try may not meet: connection exceptions (class 08), the
# server shutting down or starting (57P01-57P03), serialization failure and deadlock.
_TRANSIENT_SQLSTATES = ("08", "57P01", "57P02", "57P03", "40001", "40P01")
_TRANSIENT_SQLITE = ("database is locked", "database table is locked")


class StoreLost(StoreError):
    """The store this process opened is gone: its SQLite file was deleted or replaced (what
    was written since went into the removed file, or would). Never transient."""


def reason(exc: BaseException) -> str:
    """The driver's own message (first line), without SQLAlchemy's statement dump."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip()
    return message.splitlines()[0] if message else type(exc).__name__


def is_transient(exc: BaseException) -> bool:
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

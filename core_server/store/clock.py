"""The store's clock: lease deadlines are set and compared with the database's time, never
with a host's, so hosts whose clocks disagree cannot hand a live lease over.

`store_now(offset)` is "the database's current time plus `offset` seconds" inside a SQL
statement: PostgreSQL's `now()` (the transaction's start: every statement of one claim sees
one instant), and SQLite's own `strftime(..., 'now')`, written in the format SQLAlchemy
stores timestamps in, so that stored and computed times compare as text. A SQLite store is
one file on one host, so its Cores share that clock by construction; reading it in SQL too
keeps one code path, and no Python process's notion of time enters a lease on either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Float, literal
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.functions import FunctionElement

from streameval.core.store.models import UTCDateTime

# SQLAlchemy's SQLite DATETIME storage format ('YYYY-MM-DD HH:MM:SS.ffffff'); SQLite's %f
# gives milliseconds ('SS.SSS'), padded here to microseconds.
_SQLITE_FORMAT = "%Y-%m-%d %H:%M:%f000"


class _StoreNow(FunctionElement[datetime]):
    """The database's time plus a number of seconds (its one argument)."""

    type = UTCDateTime()
    inherit_cache = True


def store_now(offset: float | BindParameter[Any] | None = None) -> _StoreNow:
    """The database's current time (plus `offset` seconds: a number or a bound parameter)
    as a SQL expression of a UTC timestamp."""
    if offset is None:
        offset = 0.0
    if not isinstance(offset, BindParameter):
        offset = literal(float(offset), Float())
    return _StoreNow(offset)


@compiles(_StoreNow, "postgresql")
def _postgresql(element: _StoreNow, compiler: Any, **kw: Any) -> str:
    seconds = compiler.process(element.clauses, **kw)
    return f"(now() + make_interval(secs => CAST({seconds} AS DOUBLE PRECISION)))"


@compiles(_StoreNow, "sqlite")
def _sqlite(element: _StoreNow, compiler: Any, **kw: Any) -> str:
    seconds = compiler.process(element.clauses, **kw)
    return f"strftime('{_SQLITE_FORMAT}', 'now', printf('%+.6f seconds', {seconds}))"

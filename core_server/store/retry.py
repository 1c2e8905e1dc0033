"""How long the store retries what the database may recover from, and with what backoff.

A transient error (a PostgreSQL restart, a reset connection, SQLite's "database is
locked"; errors.is_transient) is retried for up to `RETRY_BUDGET_S`, the delay between tries
starting at `RETRY_FIRST_DELAY_S` and doubling to `RETRY_MAX_DELAY_S`: by the store's
reading and status methods, run creation and `append_events` (`retry_transient`), and,
while a store is open, by every new PostgreSQL connection (`retrying_connect`).

That budget is for work that outlives the store's hiccup (a run). A request of the HTTP APIs
must not wait a minute for a store that is down: under `retry_deadline(REQUEST_RETRY_BUDGET_S)`
every store call made inside stops retrying at one deadline, shared by all of them and by
the connection attempts they make (a context variable, so the threads and tasks a request
starts inherit it), and each PostgreSQL connection attempt waits at most the shortest
timeout the driver accepts (`REQUEST_CONNECT_TIMEOUT_S`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from streameval.core.store.light import StoreError

RETRY_BUDGET_S = 60.0
RETRY_FIRST_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 2.0
# What an API request gives the store: a store that cannot answer is a 503 within a second.
REQUEST_RETRY_BUDGET_S = 0.25
# libpq and psycopg read any connect_timeout under 2 s as 2 s.
REQUEST_CONNECT_TIMEOUT_S = 2
T = TypeVar("T")
# The monotonic time at which retries stop; None: each call retries for RETRY_BUDGET_S.
_deadline: ContextVar[float | None] = ContextVar("store_retry_deadline", default=None)


@contextmanager
def retry_deadline(seconds: float | None) -> Iterator[None]:
    """The store calls made inside stop retrying `seconds` from now, all together (a
    request's budget); None: each call retries for RETRY_BUDGET_S again (a run a request
    starts in the background)."""
    token = _deadline.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _deadline.reset(token)


def _retry_until() -> float:
    fixed = _deadline.get()
    return time.monotonic() + RETRY_BUDGET_S if fixed is None else fixed


def retry_transient(call: Callable[[], T]) -> T:
    """`call()`, tried again while it raises a transient StoreError, for at most
    RETRY_BUDGET_S (or until `retry_deadline`'s) with backoff. Only for calls that are safe
    to repeat."""
    deadline = _retry_until()
    delay = RETRY_FIRST_DELAY_S
    while True:
        try:
            return call()
        except StoreError as exc:
            if not exc.transient or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_DELAY_S)


def retrying_connect(enabled: Callable[[], bool]) -> Callable[..., Any]:
    """A `do_connect` hook: while the server restarts, new connections are retried with
    backoff for RETRY_BUDGET_S (or until `retry_deadline`'s) instead of failing the store
    call that needed one."""

    def connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        deadline = _retry_until()
        delay = RETRY_FIRST_DELAY_S
        if _deadline.get() is not None:  # a request: no attempt waits out the engine's timeout
            cparams = {**cparams, "connect_timeout": REQUEST_CONNECT_TIMEOUT_S}
        while True:
            try:
                return dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.OperationalError:
                if not enabled() or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)

    return connect

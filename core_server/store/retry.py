"""How long the store retries what the database may recover from, and with what backoff.

A transient error (a PostgreSQL restart, a reset connection, SQLite's "database is
locked"; errors.is_transient) is retried for up to `RETRY_BUDGET_S`, the delay between tries
starting at `RETRY_FIRST_DELAY_S` and doubling to `RETRY_MAX_DELAY_S`: by the store's
reading and status methods, run creation and `append_events` (`retry_transient`), and,
while a store is open, by every new PostgreSQL connection (`retrying_connect`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from streameval.core.store.light import StoreError

RETRY_BUDGET_S = 60.0
RETRY_FIRST_DELAY_S = 0.1
RETRY_MAX_DELAY_S = 2.0
T = TypeVar("T")


def retry_transient(call: Callable[[], T]) -> T:
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


def retrying_connect(enabled: Callable[[], bool]) -> Callable[..., Any]:
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

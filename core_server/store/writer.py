"""The one writer task of a run: queues events from the event loop and stores them in batches.

Session tasks call `put_row` with an event's row (`put` with an event; neither blocks or
awaits the database). The writer task takes consecutive rows off the queue, up to
`batch_size` or until `max_delay_s` has passed since the first one, and stores them with one
`Store.append_rows` call in a worker thread. While it gathers a batch it is woken only when
the batch can be filled or something other than an event arrives, not by every event: a
wake-up per event cost sessions more time than the event itself.
Session status changes travel through the same queue, so a session is marked finished only
after every event queued before it is committed.

Nothing accepted is dropped silently. Transient database errors are retried by the store
(Store.retrying: a PostgreSQL restart, a reset connection, a locked SQLite file). The first
write that still fails stops the writer: from then on `put` and `put_session_status` only
count what they are given (they never raise, so the in-flight sessions that call them do not
each fail with a traceback), and `flush` and `close` raise one `EventWriterFailed` naming the
cause and how many accepted events and status changes were not stored. `failure` holds it
and `wait_failed()` returns it, so a runner can stop the run at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from streameval.core.store.store import EventRow, Store, StoreError, StoreLost, event_row
from streameval.events import Event


@dataclass(frozen=True)
class _StatusChange:
    run_id: str
    session_id: str
    status: str
    options: dict[str, Any]


@dataclass(frozen=True)
class _Flush:
    done: asyncio.Future[None]


class _Stop:
    pass


class EventWriterFailed(StoreError):
    """The writer stopped: a store write failed for good. Raised by `flush` and `close`.

    `cause`: the StoreError of the failed write (a StoreLost when the store was deleted or
    replaced); `unwritten_events` / `unwritten_changes`: how many events and session status
    changes the writer accepted that are not stored (the failed batch, everything queued
    after it, and everything put since); `lost`: whether the store itself is gone."""

    def __init__(self, cause: StoreError, unwritten_events: int, unwritten_changes: int) -> None:
        self.cause = cause
        self.unwritten_events = unwritten_events
        self.unwritten_changes = unwritten_changes
        self.lost = isinstance(cause, StoreLost)
        super().__init__(
            f"{cause} ({unwritten_events} events and {unwritten_changes} session status "
            "changes the writer accepted were not stored)"
        )


_Item = EventRow | _StatusChange | _Flush | _Stop

# A batch is one transaction. SQLite rewrites every page a transaction touched, and with many
# sessions each appends to its own pages: batches of 5,000 rows cost 35% less CPU per row
# than batches of 500 (BENCHMARKS.md, "Logical pacing, third round"). A quarter of a second
# is how long an event may wait to be committed; a session's status change ends the batch.
BATCH_SIZE = 5000
MAX_DELAY_S = 0.25


class EventWriter:
    def __init__(
        self,
        store: Store,
        batch_size: int = BATCH_SIZE,
        max_delay_s: float = MAX_DELAY_S,
        owner: str | None = None,
    ) -> None:
        """`owner`: the worker whose session leases fence every write (store/queue.py)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._store = store
        self._fence: dict[str, Any] = {} if owner is None else {"owner": owner}
        self._batch_size = batch_size
        self._max_delay_s = max_delay_s
        # A plain deque, not an asyncio.Queue: every event passes through it (two per frame
        # sent) and the queue's own bookkeeping cost more than the rest of `put`.
        self._queue: collections.deque[_Item] = collections.deque()
        # Set when what the writer waits for is queued: anything while it is idle, enough
        # events or an item that ends the batch while it gathers one.
        self._more = asyncio.Event()
        self._wanted = 1
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._error: StoreError | None = None
        self._unwritten_events = 0
        self._unwritten_changes = 0
        self._failed = asyncio.Event()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="streameval-event-writer")

    def put(self, event: Event) -> None:
        """Queue an event. After a failure it is only counted as not stored (see module)."""
        self.put_row(event_row(event))

    def put_row(self, row: EventRow) -> None:
        """Queue an event's row (`event_row`, or a session's `Recorder`)."""
        if self._error is not None and not self._closed:
            self._unwritten_events += 1
            return
        self._enqueue(row)

    def put_session_status(self, run_id: str, session_id: str, status: str, **options: Any) -> None:
        """Queue `Store.set_session_status`; options are its keyword arguments."""
        if self._error is not None and not self._closed:
            self._unwritten_changes += 1
            return
        self._enqueue(_StatusChange(run_id, session_id, status, options))

    @property
    def failure(self) -> EventWriterFailed | None:
        """What `flush` and `close` will raise, once a write failed for good."""
        if self._error is None:
            return None
        return EventWriterFailed(self._error, self._unwritten_events, self._unwritten_changes)

    async def wait_failed(self) -> EventWriterFailed:
        """Wait until a write fails for good (forever if none does) and return the failure."""
        await self._failed.wait()
        failure = self.failure
        assert failure is not None
        return failure

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        self._require_running()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._enqueue(_Flush(done))
        await self._wait_for(done)
        self._raise_if_failed()

    async def close(self) -> None:
        """Store everything still queued, then stop the writer task."""
        if not self._closed:
            await self.start()  # events put before start() must not be lost
            self._closed = True
            self._queue.append(_Stop())
            self._more.set()
            await self._wait_for(self._task)
        self._raise_if_failed()

    def _enqueue(self, item: _Item) -> None:
        if self._closed:
            raise StoreError("the event writer is closed; nothing more can be stored")
        queue = self._queue
        queue.append(item)
        if len(queue) >= self._wanted or not isinstance(item, tuple):
            self._more.set()

    def _require_running(self) -> None:
        if self._task is None:
            raise StoreError("the event writer was not started (call await writer.start())")

    async def _wait_for(self, awaitable: asyncio.Future[Any]) -> None:
        # If the writer task itself died, waiting on a flush marker would never end.
        assert self._task is not None
        await asyncio.wait({awaitable, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not self._task.done() or self._error is not None:
            return
        if self._task.cancelled():
            error = StoreError("the event writer task was cancelled before storing everything")
        elif self._task.exception() is not None:
            error = StoreError(f"the event writer crashed: {self._task.exception()!r}")
        else:
            return
        self._fail(error)
        self._count_queued()

    def _count_queued(self) -> None:
        """Count what is still queued as not stored (the writer task is gone)."""
        while self._queue:
            item = self._queue.popleft()
            if isinstance(item, tuple):
                self._unwritten_events += 1
            elif isinstance(item, _StatusChange):
                self._unwritten_changes += 1
            elif isinstance(item, _Flush) and not item.done.done():
                item.done.set_result(None)

    def _fail(self, error: StoreError) -> None:
        if self._error is None:
            self._error = error
            self._failed.set()

    def _raise_if_failed(self) -> None:
        failure = self.failure
        if failure is not None:
            raise failure

    async def _run(self) -> None:
        pending: _Item | None = None
        while True:
            item = pending if pending is not None else await self._next()
            pending = None
            if isinstance(item, _Stop):
                return
            if isinstance(item, _Flush):
                item.done.set_result(None)
            elif isinstance(item, tuple):
                batch, pending = await self._collect(item)
                append = partial(self._store.append_rows, batch, **self._fence)
                await self._call_store(len(batch), 0, append)
            else:
                change = partial(
                    self._store.set_session_status,
                    item.run_id,
                    item.session_id,
                    item.status,
                    **self._fence,
                    **item.options,
                )
                await self._call_store(0, 1, change)

    async def _next(self) -> _Item:
        """The first queued item, once there is one."""
        while not self._queue:
            self._wanted = 1
            self._more.clear()
            await self._more.wait()
        return self._queue.popleft()

    async def _collect(self, first: EventRow) -> tuple[list[EventRow], _Item | None]:
        """Consecutive rows after `first`; any other item ends the batch and is returned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_delay_s
        batch = [first]
        while len(batch) < self._batch_size:
            try:
                item = self._queue.popleft()
            except IndexError:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                self._wanted = self._batch_size - len(batch)
                self._more.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._more.wait(), remaining)
                continue
            if not isinstance(item, tuple):
                return batch, item
            batch.append(item)
        return batch, None

    async def _call_store(self, events: int, changes: int, call: Callable[[], object]) -> None:
        """Run one store call in a worker thread (the store retries transient errors); after
        a failure, only count what is not stored."""
        if self._error is None:
            try:
                await asyncio.to_thread(call)
                return
            except StoreError as exc:
                self._fail(exc)
            except Exception as exc:  # any failure must reach flush()/close(), never vanish
                self._fail(StoreError(f"event writer: {type(exc).__name__}: {exc}"))
        self._unwritten_events += events
        self._unwritten_changes += changes

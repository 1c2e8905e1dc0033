"""The one writer task of a run: queues events from the event loop and stores them in batches.

Session tasks call `put` (never blocks, never awaits the database). The writer task takes
consecutive events off the queue, up to `batch_size` or until `max_delay_s` has passed since
the first one, and stores them with one `Store.append_events` call in a worker thread.
Session status changes travel through the same queue, so a session is marked finished only
after every event queued before it is committed. The first write failure stops the writer:
later items are discarded and `put`, `flush` and `close` raise it as a StoreError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from streameval.core.store.store import Store, StoreError
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


_Item = Event | _StatusChange | _Flush | _Stop


class EventWriter:
    def __init__(
        self,
        store: Store,
        batch_size: int = 500,
        max_delay_s: float = 0.05,
        owner: str | None = None,
    ) -> None:
        """`owner`: the worker whose session leases fence every write (store/queue.py)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._store = store
        self._fence: dict[str, Any] = {} if owner is None else {"owner": owner}
        self._batch_size = batch_size
        self._max_delay_s = max_delay_s
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._error: StoreError | None = None
        self._discarded = 0

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="streameval-event-writer")

    def put(self, event: Event) -> None:
        self._enqueue(event)

    def put_session_status(self, run_id: str, session_id: str, status: str, **options: Any) -> None:
        """Queue `Store.set_session_status`; options are its keyword arguments."""
        self._enqueue(_StatusChange(run_id, session_id, status, options))

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
            self._queue.put_nowait(_Stop())
            await self._wait_for(self._task)
        self._raise_if_failed()

    def _enqueue(self, item: _Item) -> None:
        if self._closed:
            raise StoreError("the event writer is closed; nothing more can be stored")
        self._raise_if_failed()
        self._queue.put_nowait(item)

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
            self._error = StoreError(
                "the event writer task was cancelled before storing everything"
            )
        elif self._task.exception() is not None:
            self._error = StoreError(f"the event writer crashed: {self._task.exception()!r}")

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            if self._discarded:
                raise StoreError(f"{self._error} ({self._discarded} later items were discarded)")
            raise self._error

    async def _run(self) -> None:
        pending: _Item | None = None
        while True:
            item = pending if pending is not None else await self._queue.get()
            pending = None
            if isinstance(item, _Stop):
                return
            if isinstance(item, _Flush):
                item.done.set_result(None)
            elif isinstance(item, Event):
                batch, pending = await self._collect(item)
                append = partial(self._store.append_events, batch, **self._fence)
                await self._call_store(len(batch), append)
            else:
                change = partial(
                    self._store.set_session_status,
                    item.run_id,
                    item.session_id,
                    item.status,
                    **self._fence,
                    **item.options,
                )
                await self._call_store(1, change)

    async def _collect(self, first: Event) -> tuple[list[Event], _Item | None]:
        """Consecutive events after `first`; a non-event item ends the batch and is returned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._max_delay_s
        batch = [first]
        while len(batch) < self._batch_size:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            if not isinstance(item, Event):
                return batch, item
            batch.append(item)
        return batch, None

    async def _call_store(self, items: int, call: Callable[[], object]) -> None:
        """Run one store call in a worker thread; after a failure, only count what is dropped."""
        if self._error is not None:
            self._discarded += items
            return
        try:
            await asyncio.to_thread(call)
        except StoreError as exc:
            self._error = exc
        except Exception as exc:  # any failure must reach flush()/close(), never vanish
            self._error = StoreError(f"event writer: {type(exc).__name__}: {exc}")

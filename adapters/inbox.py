"""The Core's messages on one connection, handled in order, each at once where it can be.

A message that arrives while the session's task waits for one is handled right there, in
the connection's `data_received`, as the task would handle it: the handler (the adapter's
hooks) runs as that task (`asyncio.current_task()` is it, so `asyncio.timeout` and friends
work), and when it finishes without waiting for anything, as a frame's hook usually does, no
queue, future or task wake-up was spent on the message. A handler that does wait goes on in
the task from where it stopped (`_Resumed`); messages arriving meanwhile wait their turn.
Hooks therefore still run one at a time, in the order the Core sent the messages.

Messages waiting their turn are bounded as websockets bounds its own queue: above
`high_water` the connection stops reading (`pause`), below `low_water` it reads again
(`resume`), so a slow adapter pushes back on the Core through TCP, where a wall-clock run
sees it as lag and dropped frames, instead of piling frames up in its memory.

When the connection ends, nothing the session still holds can reach the Core: the messages
waiting their turn are dropped, and a handler still running (a hook waiting for a model) is
cancelled (`asyncio.CancelledError` at its `await`), so an abandoned model call frees its
slot at once instead of running to its own timeout. `handle_next` then raises the close.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

from websockets.exceptions import ConnectionClosed

from streameval.delivery import Arrival

# Handles one message: False once the session is over.
Handler = Callable[[Arrival], Coroutine[Any, Any, bool]]
_Outcome = bool | Awaitable[bool]
# websockets' own defaults for its message queue (`max_queue`).
HIGH_WATER = 16
LOW_WATER = HIGH_WATER // 4
# Private to asyncio but what its own eager tasks (3.12) use to run a coroutine as a task;
# without them every message waits for the task, as it would with `recv()`.
_enter_task = getattr(asyncio.tasks, "_enter_task", None)
_leave_task = getattr(asyncio.tasks, "_leave_task", None)


class Inbox:
    """Feed it with `arrived` and `closed` (the connection's callbacks, delivery.py); the
    session's task calls `handle_next` until it returns False."""

    def __init__(
        self,
        handle: Handler,
        pause: Callable[[], None],
        resume: Callable[[], None],
        high_water: int = HIGH_WATER,
        low_water: int = LOW_WATER,
    ) -> None:
        self._handle = handle
        self._pause, self._resume = pause, resume
        self._high, self._low = high_water, low_water
        self._paused = False
        self._queued: collections.deque[Arrival] = collections.deque()
        self._waiter: asyncio.Future[_Outcome] | None = None
        self._task: asyncio.Task[Any] | None = None  # the session's, while it waits
        self._handling: asyncio.Task[Any] | None = None  # the session's, while a handler waits
        self._cancelled = False  # the close cancelled the running handler
        self._loop: asyncio.AbstractEventLoop | None = None  # that task's
        self._closed: ConnectionClosed | None = None

    def arrived(self, raw: Arrival, _arrived_ns: int = 0) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done() or self._queued:
            self._queued.append(raw)
            if len(self._queued) > self._high and not self._paused:
                self._paused = True
                self._pause()
        elif asyncio.current_task(self._loop) is not None or _enter_task is None:
            # Delivered from inside a task: the handler cannot run as the session's here.
            # (The loop is named: on Python 3.11 finding the running one is a getpid()
            # system call, 9% of an adapter's time per frame in a py-spy profile.)
            waiter.set_result(self._handle(raw))
        else:
            self._handle_now(raw, waiter)

    def closed(self, exc: ConnectionClosed) -> None:
        self._closed = exc
        self._queued.clear()  # nothing they would lead to could reach the Core any more
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        elif self._handling is not None and not self._cancelled:
            self._cancelled = True
            self._handling.cancel("the connection to the Core ended")

    async def handle_next(self) -> bool:
        """Handle the next message, waiting for one if none is queued; False once the
        session is over. Raises what handling raised, or ConnectionClosed once the
        connection ended and every message that came before was handled."""
        if self._queued:
            raw = self._queued.popleft()
            if self._paused and len(self._queued) < self._low:
                self._paused = False
                self._resume()
            return await self._finish(self._handle(raw))
        if self._closed is not None:
            raise self._closed
        loop = self._loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._task = asyncio.current_task(loop)
        try:
            outcome = await self._waiter
        finally:
            self._waiter = self._task = None
        if isinstance(outcome, bool):
            return outcome
        if self._closed is not None and not isinstance(outcome, _Resumed):
            outcome.close()  # closed before the handler began: it never runs
            raise self._closed
        return await self._finish(outcome)

    async def _finish(self, handling: Coroutine[Any, Any, bool] | _Resumed) -> bool:
        """Await a handler; should the connection end meanwhile, it is cancelled, and the
        close is raised however the handler ended (a cancellation it swallowed included)."""
        task = self._handling = asyncio.current_task()
        assert task is not None
        if self._closed is not None:
            # Closed while the resumed handler waited to go on: it is cancelled at its
            # first step (a _Resumed always suspends first, so the cancel reaches it).
            self._cancelled = True
            task.cancel("the connection to the Core ended")
        try:
            outcome = await handling
        except BaseException:
            if self._took_back_cancel(task):
                raise self._close_error() from None
            raise
        finally:
            self._handling = None
        if self._took_back_cancel(task):
            raise self._close_error()
        return outcome

    def _close_error(self) -> ConnectionClosed:
        assert self._closed is not None  # only the close cancels a handler
        return self._closed

    def _took_back_cancel(self, task: asyncio.Task[Any]) -> bool:
        """Withdraw the cancellation the close asked for: True if it did ask, and nothing
        else (the server shutting down) cancels the task too."""
        if not self._cancelled:
            return False
        self._cancelled = False
        return task.uncancel() == 0

    def _handle_now(self, raw: Arrival, waiter: asyncio.Future[_Outcome]) -> None:
        """Run the handler as the waiting task until it finishes or waits for something."""
        task = self._task
        assert task is not None
        loop = task.get_loop()
        handling = self._handle(raw)
        assert _enter_task is not None and _leave_task is not None
        _enter_task(loop, task)
        try:
            yielded = handling.send(None)
        except StopIteration as stop:
            if not stop.value:
                waiter.set_result(False)  # the session is over
            # else handled: the task keeps waiting for the next message
        except Exception as exc:  # the task raises it, as if it had handled the message
            waiter.set_exception(exc)
        else:
            waiter.set_result(_Resumed(handling, yielded))
        finally:
            _leave_task(loop, task)


class _Resumed:
    """A coroutine started outside any task and suspended on `yielded` (a future, or None
    for a bare yield): awaiting this goes on with it in the awaiting task, which waits for
    `yielded` first, exactly as if it had run the coroutine from the start."""

    def __init__(self, coroutine: Coroutine[Any, Any, bool], yielded: Any) -> None:
        self.coroutine = coroutine
        self.yielded = yielded

    def __await__(self) -> Generator[Any, Any, bool]:
        coroutine, yielded = self.coroutine, self.yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as exc:  # cancellation included: the coroutine sees it
                try:
                    yielded = coroutine.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = coroutine.send(sent)
                except StopIteration as stop:
                    return stop.value

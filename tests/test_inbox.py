"""The SDK's inbox: each of the Core's messages handled in order, one at a time, at once in
the connection's callback when the session's task waits for it (adapters/inbox.py).

Messages are fed the way a connection feeds them: from a plain event-loop callback
(`loop.call_soon`), outside any task, as `data_received` runs."""

from __future__ import annotations

import asyncio

import pytest
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from streameval.adapters.inbox import Inbox


class Session:
    """A session task looping over `handle_next`, with a log of what its handler did."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.inbox = Inbox(self.handle)
        self.task = asyncio.ensure_future(self.run())
        self.slow: dict[str, asyncio.Future[None]] = {}

    async def run(self) -> None:
        while await self.inbox.handle_next():
            pass

    async def handle(self, raw) -> bool:
        self.log.append(f"start {raw}" + ("" if asyncio.current_task() is self.task else " ?"))
        if raw in self.slow:
            await self.slow[raw]
        if raw == "boom":
            raise ValueError("boom")
        if raw == "timeout":
            async with asyncio.timeout(0.01):
                await asyncio.sleep(5)
        self.log.append(f"end {raw}")
        return raw != "end"

    async def feed(self, *messages: str) -> list[int]:
        """Deliver each message from a loop callback; how many log lines each callback
        left behind (what was handled inside it)."""
        done: list[int] = []

        def deliver(raw: str) -> None:
            before = len(self.log)
            self.inbox.arrived(raw, 0)
            done.append(len(self.log) - before)

        for raw in messages:
            asyncio.get_running_loop().call_soon(deliver, raw)
        await asyncio.sleep(0)
        return done


async def test_a_message_that_needs_no_wait_is_handled_inside_the_callback_as_the_task():
    session = Session()
    await asyncio.sleep(0)  # the task waits for its first message
    assert await session.feed("a", "b", "c") == [2, 2, 2]
    assert session.log == ["start a", "end a", "start b", "end b", "start c", "end c"]
    assert await session.feed("end") == [2]
    await asyncio.wait_for(session.task, 1)


async def test_a_handler_that_waits_goes_on_in_the_task_and_later_messages_wait_their_turn():
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    assert await session.feed("slow", "x", "y") == [1, 0, 0]
    await asyncio.sleep(0.01)
    assert session.log == ["start slow"]
    session.slow["slow"].set_result(None)
    await session.feed("end")
    await asyncio.wait_for(session.task, 1)
    assert session.log == [
        "start slow",
        "end slow",
        "start x",
        "end x",
        "start y",
        "end y",
        "start end",
        "end end",
    ]


async def test_a_timeout_begun_in_the_callback_fires_in_the_task():
    session = Session()
    await asyncio.sleep(0)
    await session.feed("timeout")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(session.task, 1)
    assert session.log == ["start timeout"]


async def test_what_a_handler_raises_in_the_callback_is_raised_by_the_task():
    session = Session()
    await asyncio.sleep(0)
    assert await session.feed("boom", "after") == [1, 0]
    with pytest.raises(ValueError, match="boom"):
        await asyncio.wait_for(session.task, 1)
    assert session.log == ["start boom"]


async def test_cancelling_the_task_reaches_a_handler_it_resumed():
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    await session.feed("slow")
    await asyncio.sleep(0.01)
    session.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await session.task
    assert session.slow["slow"].cancelled()  # the handler's own wait was cancelled


async def test_the_close_is_raised_once_every_message_before_it_is_handled():
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    await session.feed("slow", "x")
    closed = ConnectionClosedOK(Close(1000, ""), Close(1000, ""), rcvd_then_sent=True)
    session.inbox.closed(closed)
    session.slow["slow"].set_result(None)
    with pytest.raises(ConnectionClosedOK):
        await asyncio.wait_for(session.task, 1)
    assert session.log == ["start slow", "end slow", "start x", "end x"]


async def test_a_message_delivered_from_inside_a_task_is_handled_by_the_session_task():
    session = Session()
    await asyncio.sleep(0)
    session.inbox.arrived("a", 0)  # this test is a task: not the session's
    assert session.log == []
    await session.feed("end")
    await asyncio.wait_for(session.task, 1)
    assert session.log == ["start a", "end a", "start end", "end end"]

"""The SDK's inbox: each of the Core's messages handled in order, one at a time, at once in
the connection's callback when the session's task waits for it (adapters/inbox.py).

Messages are fed the way a connection feeds them: from a plain event-loop callback
(`loop.call_soon`), outside any task, as `data_received` runs."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from streameval.adapters.baselines import AlwaysAdapter
from streameval.adapters.inbox import HIGH_WATER, LOW_WATER, Inbox
from streameval.adapters.server import serve
from streameval.protocol import WS_PATH, FrameHeader, SessionStart, encode_frame
from tests.test_protocol import CONDITIONS
from tests.test_send_path import sent_until_one_waits


class Session:
    """A session task looping over `handle_next`, with a log of what its handler did."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.inbox = Inbox(
            self.handle,
            pause=lambda: self.log.append("pause"),
            resume=lambda: self.log.append("resume"),
        )
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


def clean_close() -> ConnectionClosedOK:
    return ConnectionClosedOK(Close(1000, ""), Close(1000, ""), rcvd_then_sent=True)


async def test_the_close_cancels_the_running_handler_and_drops_what_waits():
    """An abandoned hook (a model call) is cancelled at its await; the messages behind it
    could not be answered any more and never run; the task raises the close, not the
    cancellation, and is not left cancelling (its cleanup may still await)."""
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    await session.feed("slow", "x")
    session.inbox.closed(clean_close())
    with pytest.raises(ConnectionClosedOK):
        await asyncio.wait_for(session.task, 1)
    assert session.slow["slow"].cancelled()
    assert session.log == ["start slow"]
    assert session.task.cancelling() == 0


async def test_a_handler_that_swallows_the_cancellation_still_ends_with_the_close():
    session = Session()
    swallowed: list[str] = []

    async def stubborn(raw) -> bool:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            swallowed.append(raw)
        return True

    session.inbox._handle = stubborn
    await asyncio.sleep(0)
    await session.feed("slow", "x")
    session.inbox.closed(clean_close())
    with pytest.raises(ConnectionClosedOK):
        await asyncio.wait_for(session.task, 1)
    assert swallowed == ["slow"]  # "x", queued behind it, never ran
    assert session.task.cancelling() == 0


async def test_a_close_between_the_callback_and_the_task_cancels_the_resumed_handler():
    """The handler began inside the callback and suspended; the close comes before the
    session's task went on with it: the cancellation still reaches the handler."""
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    loop.call_soon(session.inbox.arrived, "slow", 0)
    loop.call_soon(session.inbox.closed, clean_close())
    with pytest.raises(ConnectionClosedOK):
        await asyncio.wait_for(session.task, 1)
    assert session.slow["slow"].cancelled()
    assert session.log == ["start slow"]


async def test_cancelling_the_session_task_during_a_close_stays_a_cancellation():
    """The server shutting down cancels the task too: that is not taken back."""
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    await session.feed("slow")
    session.task.cancel()
    session.inbox.closed(clean_close())
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(session.task, 1)


async def test_a_message_delivered_from_inside_a_task_is_handled_by_the_session_task():
    session = Session()
    await asyncio.sleep(0)
    session.inbox.arrived("a", 0)  # this test is a task: not the session's
    assert session.log == []
    await session.feed("end")
    await asyncio.wait_for(session.task, 1)
    assert session.log == ["start a", "end a", "start end", "end end"]


async def test_messages_waiting_their_turn_pause_the_connection_past_the_high_water_mark():
    """As websockets' own queue does: the Core is pushed back through TCP, not buffered."""
    session = Session()
    session.slow["slow"] = asyncio.get_running_loop().create_future()
    await asyncio.sleep(0)
    waiting = [f"m{k}" for k in range(HIGH_WATER + 2)] + ["end"]
    await session.feed("slow", *waiting)
    assert session.log == ["start slow", "pause"]  # once, past HIGH_WATER waiting
    session.slow["slow"].set_result(None)
    await asyncio.wait_for(session.task, 1)
    started = [line.removeprefix("start ") for line in session.log if line.startswith("start")]
    assert started == ["slow", *waiting]
    # Reading resumes once fewer than LOW_WATER wait: after handing out all but that many.
    resumed_at = session.log.index("resume")
    handed_out = [line for line in session.log[:resumed_at] if line.startswith("start m")]
    assert len(handed_out) == len(waiting) - LOW_WATER
    assert session.log.count("pause") == session.log.count("resume") == 1


class Stalled(AlwaysAdapter):
    """Its frame hook waits until the test lets it go: a model slower than the stream."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.frames = 0

    async def on_frame(self, session, frame) -> None:
        await self.go.wait()
        self.frames += 1


async def test_an_adapter_slower_than_the_stream_pushes_back_on_the_core_through_tcp():
    """Against the SDK's server, a sender of frames the adapter has not handled yet ends up
    waiting on a full socket, as with websockets' own queue, instead of every frame piling
    up in the adapter's memory; once the hook goes on, every frame is handled in order."""
    adapter = Stalled()
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(adapter, port=0, ready=bound.set_result))
    port = await asyncio.wait_for(bound, 10)
    payload = bytes(256 * 1024)
    header = FrameHeader(index=0, frame_id="v:0", t=0.0, width=4, height=2, nbytes=len(payload))
    message = encode_frame(header, payload)
    try:
        async with connect(f"ws://127.0.0.1:{port}{WS_PATH}", compression=None) as ws:
            await ws.recv()  # the hello
            start = SessionStart(
                run_id="r", session_id="s", record_ids=["q"], conditions=CONDITIONS
            )
            await ws.send(start.model_dump_json())
            sent, sending = await sent_until_one_waits(ws, message, 0.5, limit=150)
            assert sent >= HIGH_WATER  # the inbox's share, then the sockets' buffers
            adapter.go.set()
            await asyncio.wait_for(sending, 10)
            acks = [json.loads(await asyncio.wait_for(ws.recv(), 10)) for _ in range(sent + 1)]
            assert [ack["type"] for ack in acks] == ["frame_ack"] * (sent + 1)
            assert adapter.frames == sent + 1
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server

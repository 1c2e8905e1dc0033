"""How a timeline is played: the two pacings of docs/protocol.md ("Pacing").

A pacing only decides *when* each timeline item goes out and what to wait for; sending,
recording and receiving are the `Stream` it drives (the session driver's send path and its
waits). `LogicalPacing` waits for each frame's ack and each decision; `WallClockPacing`
sends frames at their scheduled times, records lag and drops frames rather than stall.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from streameval.core.session.protocol_state import Awaited
from streameval.core.streams.timeline import TimelineItem


class VideoClock:
    """Maps Core runtimes to video time: the last frame sent, or under wall-clock pacing
    the stream's origin advanced at the run's speed."""

    def __init__(self, speed: float = 1.0) -> None:
        self.speed = speed
        self.current_t: float | None = None  # the last frame sent
        self.origin: tuple[int, float] | None = None  # (runtime_ns, video t) under wall clock

    def frame_sent(self, t: float) -> None:
        self.current_t = t

    def start(self, origin_ns: int, origin_t: float) -> None:
        self.origin = (origin_ns, origin_t)

    def at(self, now_ns: int) -> float | None:
        if self.origin is None:
            return self.current_t
        origin_ns, origin_t = self.origin
        return origin_t + (now_ns - origin_ns) / 1e9 * self.speed


class Stream(Protocol):
    """What a pacing drives: the session's send path and its one wait."""

    async def send_frame(
        self, item: TimelineItem, *, scheduled_ns: int | None, lag_ns: int | None
    ) -> None: ...

    async def play_frames(self, items: Sequence[TimelineItem]) -> None:
        """Send consecutive frames, each once the one before it is acknowledged."""
        ...

    def drop_frame(self, item: TimelineItem, *, scheduled_ns: int, lag_ns: int) -> None: ...

    async def send_audio(
        self, item: TimelineItem, *, scheduled_ns: int | None, lag_ns: int | None
    ) -> None: ...

    async def send_step(self, item: TimelineItem) -> None: ...

    async def send_task(self, item: TimelineItem) -> None: ...

    async def cut(self, item: TimelineItem) -> None:
        """Drop the connection (a `cut` item), reconnect and start the session again."""
        ...

    def expect(self, awaited: Awaited, key: int | None = None) -> asyncio.Future[None]: ...

    async def wait(self, future: asyncio.Future[None], what: str) -> None: ...

    def check(self) -> None:
        """Raise the session's failure, if it has failed."""
        ...

    @property
    def response_open(self) -> bool: ...


class Pacing(Protocol):
    async def play(self, items: Sequence[TimelineItem], stream: Stream) -> None: ...


class LogicalPacing:
    """Wait for each frame's ack, each step's decision and each question's answer: the
    run is reproducible and independent of the model's speed."""

    async def play(self, items: Sequence[TimelineItem], stream: Stream) -> None:
        for frames, run in itertools.groupby(items, key=lambda item: item.kind == "frame"):
            if frames:
                await stream.play_frames(tuple(run))
            else:
                for item in run:
                    await self._play(item, stream)

    async def _play(self, item: TimelineItem, stream: Stream) -> None:
        if item.kind == "step":
            waiter = stream.expect(Awaited.DECISION, item.step)
            await stream.send_step(item)
            await stream.wait(waiter, f"decision at step {item.step}")
        elif item.kind == "question":
            waiter = stream.expect(Awaited.DECISION)
            await stream.send_task(item)
            await stream.wait(waiter, "answer")
        elif item.kind == "audio":
            waiter = stream.expect(Awaited.AUDIO_ACK, item.chunk)
            await stream.send_audio(item, scheduled_ns=None, lag_ns=None)
            await stream.wait(waiter, f"audio_ack of chunk {item.chunk}")
        elif item.kind == "cut":
            await stream.cut(item)
        else:
            await stream.send_task(item)


@dataclass
class WallClockPacing:
    """Frames at `origin + (t - t_first) / speed`, never waiting for the adapter: a frame
    whose successor is already due is dropped (and recorded), every sent frame records its
    lag. Only the last question's answer, or a response still open at the end, is awaited.

    An item goes out at its `send_at` time: its `t`, or later for a frame held back (a
    perturbation's burst). A frame a perturbation sends back to back with the next one (a
    burst's held frames, a duplicate's first copy: `send_t` set) is never dropped for it.
    """

    speed: float
    initiation: str  # the adapter's declared initiation: autonomous ones get no steps
    clock: VideoClock
    now_ns: Callable[[], int] = time.monotonic_ns
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def _scheduled_ns(self, t: float) -> int:
        assert self.clock.origin is not None
        origin_ns, origin_t = self.clock.origin
        return origin_ns + int((t - origin_t) / self.speed * 1e9)

    async def play(self, items: Sequence[TimelineItem], stream: Stream) -> None:
        self.clock.start(self.now_ns(), items[0].send_at)
        following = _NextFrame(items)
        answer: asyncio.Future[None] | None = None
        for position, item in enumerate(items):
            scheduled = self._scheduled_ns(item.send_at)
            delay = scheduled - self.now_ns()
            if delay > 0:
                await self.sleep(delay / 1e9)
            stream.check()
            lag = self.now_ns() - scheduled
            if item.kind == "frame":
                due = following.after(position)
                grouped = item.send_t is not None  # sent back to back with the next one
                if not grouped and due is not None and self._scheduled_ns(due) <= self.now_ns():
                    # The next frame is already due: skip this one, never stall the clock.
                    stream.drop_frame(item, scheduled_ns=scheduled, lag_ns=lag)
                    continue
                await stream.send_frame(item, scheduled_ns=scheduled, lag_ns=lag)
            elif item.kind == "audio":
                # Sound is never dropped: a late chunk goes out late, its lag recorded.
                await stream.send_audio(item, scheduled_ns=scheduled, lag_ns=lag)
            elif item.kind == "step":
                # Autonomous adapters speak on their own under wall clock; only polled ones
                # are asked to decide.
                if self.initiation != "autonomous":
                    await stream.send_step(item)
            elif item.kind == "cut":
                await stream.cut(item)
                answer = None  # an answer in flight is lost with the connection
            else:
                if item.kind == "question":
                    answer = stream.expect(Awaited.DECISION)
                await stream.send_task(item)
        if answer is not None:
            await stream.wait(answer, "answer")
        elif stream.response_open:
            # Let a response that began inside the stream finish; its onset is already known.
            waiter = stream.expect(Awaited.DECISION)
            if stream.response_open:
                await stream.wait(waiter, "final of the open response")


def pacing_for(pacing: str, *, speed: float, initiation: str, clock: VideoClock) -> Pacing:
    """The pacing a run's conditions name (`logical` or `wall_clock`)."""
    if pacing == "logical":
        return LogicalPacing()
    return WallClockPacing(speed, initiation, clock)


class _NextFrame:
    """The send time of the next frame after a position, for positions visited in order:
    a cursor that only moves forward, so each item is looked at once in all (a search per
    frame made a long timeline quadratic) and nothing is held per item."""

    def __init__(self, items: Sequence[TimelineItem]) -> None:
        self.items = items
        self.ahead = 0  # the first frame at or after the last position asked, or the end

    def after(self, position: int) -> float | None:
        items = self.items
        ahead = max(self.ahead, position + 1)
        while ahead < len(items) and items[ahead].kind != "frame":
            ahead += 1
        self.ahead = ahead
        return items[ahead].send_at if ahead < len(items) else None

"""The send path at scale: frame messages shared across sessions, the next-frame cursor of
wall-clock pacing, one response timer per session, and endpoints beyond 1,024 sessions.

The frame map is tested with fake frame cache entries that count their reads; the worker with
a real SQLite store and a runner that holds every session it is given until all are held.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from streameval import fast_send
from streameval.core.config import EndpointConfig
from streameval.core.frames.errors import FrameCacheError
from streameval.core.frames.types import FrameRef
from streameval.core.launch.control_adapters import AdapterRegistration
from streameval.core.run.capacity import slots_per_endpoint
from streameval.core.run.collector import fewer_pauses
from streameval.core.run.worker import Worker
from streameval.core.session.driver import SessionOutcome
from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.frame_messages import FrameMessages, build_message, retimed
from streameval.core.session.pacing import VideoClock, WallClockPacing, _NextFrame
from streameval.core.session.protocol_state import Awaited, ProtocolState, Resolution
from streameval.core.session.recorder import Recorder, frame_sent_payload
from streameval.core.session.sender import SessionStream
from streameval.core.session.waiting import Waits
from streameval.core.store.store import SessionInfo, Store, StoreError, StoreLost, event_row
from streameval.core.store.writer import EventWriter
from streameval.core.store.writer_process import StoreProcess, child_url
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import Timeline, TimelineItem
from streameval.events import Event, EventKind, read_payload
from streameval.fast_send import send_message
from streameval.open_files import raise_open_file_limit
from streameval.protocol import decode_frame
from tests.event_examples import example
from tests.recording import reading_into
from tests.test_pacing import QA, FakeClock, FakeSocket, FakeStream, frame, step

# ------------------------------------------------------------------ frame messages


class CountingFrames:
    """A frame cache entry whose JPEGs are made up, counting each read and its thread."""

    def __init__(self, directory: Path, count: int, size: int = 100) -> None:
        self.directory = directory
        self.frames = tuple(
            FrameRef(k, k, float(k), f"v:{k}", 4, 2, size + k) for k in range(count)
        )
        self.reads: dict[int, int] = {}
        self.threads: set[int] = set()
        self.failing: set[int] = set()
        self.discarded = 0
        self.gate: threading.Event | None = None  # when set up, reads wait for it

    def read(self, ref: FrameRef) -> bytes:
        if self.gate is not None:
            self.gate.wait(5)
        self.reads[ref.index] = self.reads.get(ref.index, 0) + 1
        self.threads.add(threading.get_ident())
        if ref.index in self.failing:
            raise FrameCacheError(f"frame cache {self.directory}: cannot read sample {ref.index}")
        return bytes([ref.index % 256]) * ref.nbytes

    def discard(self) -> None:
        self.discarded += 1


def session_on(frames: CountingFrames, messages: FrameMessages):
    plan = SessionPlan("run", QA.record_id, QA, Timeline(QA.record_id, "qa", ()), frames)  # type: ignore[arg-type]
    events: list[Event] = []
    ws = FakeSocket()
    recorder = Recorder("run", QA.record_id, reading_into(events))
    stream = SessionStream(ws, plan, recorder, ProtocolState(), Waits(1.0), VideoClock(), messages)
    return stream, ws, events


async def send_all(stream: SessionStream, refs: tuple[FrameRef, ...]) -> None:
    for ref in refs:
        await stream.send_frame(TimelineItem("frame", ref.t, ref), scheduled_ns=None, lag_ns=None)


async def test_each_frame_is_read_once_for_all_the_sessions_of_the_process(tmp_path):
    frames = CountingFrames(tmp_path, 40)
    messages = FrameMessages()
    sessions = [session_on(frames, messages) for _ in range(25)]
    await asyncio.gather(*(send_all(stream, frames.frames) for stream, _, _ in sessions))

    assert frames.reads == {k: 1 for k in range(40)}
    assert messages.reads == 40
    # Off the event loop: on the map's reader threads.
    assert threading.get_ident() not in frames.threads
    first = sessions[0][1].sent
    for _, ws, events in sessions:
        assert ws.sent == first  # one message per frame, the same bytes for every session
        assert [e.payload.bytes for e in events] == [ref.nbytes for ref in frames.frames]
    for ref, message in zip(frames.frames, first, strict=True):
        header, payload = decode_frame(message)
        assert (header.index, header.frame_id, header.t, header.nbytes) == (
            ref.index,
            ref.frame_id,
            ref.t,
            ref.nbytes,
        )
        assert payload == bytes([ref.index % 256]) * ref.nbytes


async def test_a_frame_that_cannot_be_read_fails_its_session_and_is_read_again_later(tmp_path):
    frames = CountingFrames(tmp_path, 12)
    frames.failing = {5}
    messages = FrameMessages()
    stream, ws, events = session_on(frames, messages)
    with pytest.raises(SessionFailure) as failed:
        await send_all(stream, frames.frames)
    assert (failed.value.stage, failed.value.cause) == (FailureStage.FRAMES, "infrastructure")
    assert failed.value.reason == f"frame cache {tmp_path}: cannot read sample 5"
    assert len(ws.sent) == len(events) == 5  # everything before it went out, nothing after
    assert frames.discarded == 1
    # The entry is rebuilt: its messages are read anew, the sample that failed included.
    assert messages.cached(frames, frames.frames[0]) is None
    frames.failing = set()
    again, ws, _ = session_on(frames, messages)
    await send_all(again, frames.frames)
    assert len(ws.sent) == 12
    assert frames.reads[5] == 3  # prefetched with sample 0, asked for, then read once more


async def test_a_session_cancelled_while_waiting_does_not_cancel_the_read(tmp_path):
    frames = CountingFrames(tmp_path, 3)
    frames.gate = threading.Event()
    messages = FrameMessages()
    ref = frames.frames[0]
    cancelled = asyncio.create_task(messages.get(frames, ref))
    waiting = asyncio.create_task(messages.get(frames, ref))
    await asyncio.sleep(0.01)
    cancelled.cancel()
    frames.gate.set()
    message = await waiting
    assert cancelled.cancelled()
    assert message.nbytes == ref.nbytes
    assert frames.reads[0] == 1


async def test_the_map_of_messages_is_bounded_in_bytes(tmp_path):
    frames = CountingFrames(tmp_path, 10, size=1000)
    messages = FrameMessages(max_bytes=3500, prefetch=0)
    stream, _, _ = session_on(frames, messages)
    await send_all(stream, frames.frames)
    kept = [ref for ref in frames.frames if messages.cached(frames, ref) is not None]
    assert [ref.index for ref in kept] == [7, 8, 9]  # the most recently used
    await send_all(stream, frames.frames[:1])
    assert frames.reads[0] == 2  # evicted, read again


# ------------------------------------------------------------------ the next-frame cursor


def next_frame_by_search(items: list[TimelineItem], position: int) -> float | None:
    """What wall-clock pacing did before: search the rest of the timeline at every frame."""
    return next((item.t for item in items[position + 1 :] if item.kind == "frame"), None)


def odd_timeline(rng: random.Random) -> list[TimelineItem]:
    """Variable gaps (0 included: frames at one time), runs of steps and tasks between
    frames, timelines that start or end without a frame."""
    items: list[TimelineItem] = []
    t = rng.choice([0.0, 3.7])
    index = 0
    for _ in range(rng.randint(0, 60)):
        kind = rng.choices(["frame", "step", "question", "instruction"], [6, 3, 1, 1])[0]
        if kind == "frame":
            t += rng.choice([0.0, 0.001, 1 / 30, 0.5, 1.0, 2.75])
            items.append(frame(index, t))
            index += 1
        elif kind == "step":
            items.append(step(len(items), t))
        else:
            items.append(TimelineItem(kind, t))
    return items


@pytest.mark.parametrize("seed", range(200))
def test_the_next_frame_cursor_gives_the_times_the_search_gave(seed):
    items = odd_timeline(random.Random(seed))
    every = _NextFrame(items)
    assert [every.after(p) for p in range(len(items))] == [
        next_frame_by_search(items, p) for p in range(len(items))
    ]
    # The pacing asks only at frames (skipping everything between), in order.
    at_frames = _NextFrame(items)
    frames = [p for p, item in enumerate(items) if item.kind == "frame"]
    assert [at_frames.after(p) for p in frames] == [next_frame_by_search(items, p) for p in frames]


async def test_wall_clock_drops_on_a_variable_rate_timeline_as_before():
    second = 1_000_000_000
    clock = FakeClock()
    items = [frame(0, 0.0), frame(1, 0.1), frame(2, 0.15), step(0, 0.15)]
    items += [frame(3, 1.0), frame(4, 1.0), frame(5, 2.5)]
    # Sending frame 0 takes 0.12 s: frame 1 is late but its successor is not yet due.
    stream = FakeStream(clock=clock, send_cost_ns={0: 12 * second // 100})
    pacing = WallClockPacing(1.0, "polled", VideoClock(), clock.now_ns, clock.sleep)
    await pacing.play(items, stream)
    assert stream.calls == [
        ("frame", 0, 0, 0),
        ("frame", 1, second // 10, 2 * second // 100),
        ("frame", 2, 15 * second // 100, 0),
        ("step", 0),
        ("drop", 3, second, 0),  # frame 4 shows the same time: it is already due
        ("frame", 4, second, 0),
        ("frame", 5, 5 * second // 2, 0),
    ]


# ------------------------------------------------------------------ runs of frames


class AckingSocket:
    """An adapter's socket that acknowledges each frame `delay_s` after it arrives (none from
    `silent_from` on), as the session's receiver does, noting how each frame was sent."""

    def __init__(self, stream_of: list[SessionStream], delay_s: float = 0.0) -> None:
        self.stream_of = stream_of  # the stream, once made (it is made with this socket)
        self.delay_s = delay_s
        self.silent_from: int | None = None
        self.full_at: set[int] = set()  # frame indices at which the write buffer is full
        self.paths: list[tuple[int, str]] = []

    async def send(self, message: str | bytes) -> None:
        raise AssertionError("only frames are sent here")

    async def send_frame(self, data: bytes) -> None:
        self._arrived(data, "awaited")

    def can_send_now(self) -> bool:
        return len(self.paths) not in self.full_at

    def send_now(self, data: bytes) -> None:
        self._arrived(data, "at once")

    def _arrived(self, data: bytes, path: str) -> None:
        index = decode_frame(data)[0].index
        self.paths.append((index, path))
        if self.silent_from is None or index < self.silent_from:
            asyncio.get_running_loop().call_later(self.delay_s, self._ack, index)

    def _ack(self, index: int) -> None:
        stream = self.stream_of[0]
        assert stream.protocol.accept_ack(index) is None
        stream.recorder.frame_ack(time.monotonic_ns(), stream.clock.current_t, index)
        stream.waits.resolve(Resolution(Awaited.ACK, index))


async def chained_session(
    frames: CountingFrames, messages: FrameMessages, delay_s: float = 0.0, timeout_s: float = 1.0
):
    protocol = ProtocolState()
    protocol.greeted = True
    streams: list[SessionStream] = []
    ws = AckingSocket(streams, delay_s)
    events: list[Event] = []
    recorder = Recorder("run", QA.record_id, reading_into(events))
    plan = SessionPlan("run", QA.record_id, QA, Timeline(QA.record_id, "qa", ()), frames)  # type: ignore[arg-type]
    waits = Waits(timeout_s)
    streams.append(SessionStream(ws, plan, recorder, protocol, waits, VideoClock(), messages))  # type: ignore[arg-type]
    return streams[0], ws, events


async def in_memory(tmp_path: Path, count: int) -> tuple[CountingFrames, FrameMessages]:
    """Frames whose messages are all in memory already."""
    frames = CountingFrames(tmp_path, count)
    messages = FrameMessages()
    await asyncio.gather(*(messages.get(frames, ref) for ref in frames.frames))
    return frames, messages


def frame_items(frames: CountingFrames) -> list[TimelineItem]:
    return [TimelineItem("frame", ref.t, ref) for ref in frames.frames]


async def test_a_run_of_frames_in_memory_is_sent_from_the_acks(tmp_path):
    frames, messages = await in_memory(tmp_path, 6)
    stream, ws, events = await chained_session(frames, messages)
    await stream.play_frames(frame_items(frames))

    assert ws.paths == [(0, "awaited")] + [(k, "at once") for k in range(1, 6)]
    assert [(e.kind, e.payload.index) for e in events] == [
        (kind, k) for k in range(6) for kind in (EventKind.FRAME_SENT, EventKind.FRAME_ACK)
    ]
    assert [e.seq for e in events] == list(range(12))
    assert [e.payload.bytes for e in events[::2]] == [ref.nbytes for ref in frames.frames]
    assert stream.protocol.sent_frames == set(range(6))
    assert (stream.clock.current_t, stream.last_frame) == (5.0, frames.frames[5])


async def test_a_frame_that_cannot_go_at_once_is_sent_by_the_session_and_the_run_goes_on(
    tmp_path,
):
    frames = CountingFrames(tmp_path, 7)
    messages = FrameMessages(prefetch=0)
    for ref in frames.frames:
        if ref.index != 4:
            await messages.get(frames, ref)  # frame 4 is not in memory
    stream, ws, events = await chained_session(frames, messages)
    ws.full_at = {5}
    items = frame_items(frames)
    items[2] = TimelineItem("frame", 2.5, frames.frames[2])  # retimed: its own message
    await stream.play_frames(items)

    assert ws.paths == [
        (0, "awaited"),
        (1, "at once"),
        (2, "awaited"),  # retimed
        (3, "at once"),
        (4, "awaited"),  # read from the frame cache first
        (5, "awaited"),  # the write buffer was full
        (6, "at once"),
    ]
    assert [(e.kind, e.payload.index) for e in events] == [
        (kind, k) for k in range(7) for kind in (EventKind.FRAME_SENT, EventKind.FRAME_ACK)
    ]
    retimed = events[4].payload
    assert (retimed.t, retimed.source_t) == (2.5, 2.0)
    assert frames.reads[4] == 1


async def test_each_frame_of_a_run_gets_a_whole_timeout_and_a_silence_names_its_frame(tmp_path):
    frames, messages = await in_memory(tmp_path, 8)
    # Each ack takes half the timeout: the run outlasts several timeouts, no frame does.
    stream, ws, events = await chained_session(frames, messages, delay_s=0.03, timeout_s=0.06)
    ws.silent_from = 6
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(SessionFailure) as timed_out:
        await stream.play_frames(frame_items(frames))
    assert loop.time() - started >= 6 * 0.03
    assert (timed_out.value.stage, timed_out.value.reason) == (
        FailureStage.RESPONSE,
        "no frame 6 acknowledgement within 0.06s",
    )
    assert [index for index, _ in ws.paths] == list(range(7))  # nothing after the silence
    assert events[-1].kind == EventKind.FRAME_SENT and events[-1].payload.index == 6
    stream.waits.close()


async def test_a_session_that_fails_during_a_run_sends_nothing_more(tmp_path):
    frames, messages = await in_memory(tmp_path, 6)
    stream, ws, _ = await chained_session(frames, messages, delay_s=0.01)
    ws.silent_from = 3
    failure = SessionFailure(FailureStage.STREAMING, "adapter closed the connection", "adapter")
    asyncio.get_running_loop().call_later(0.05, stream.waits.fail, failure)
    with pytest.raises(SessionFailure) as failed:
        await stream.play_frames(frame_items(frames))
    assert failed.value is failure
    assert [index for index, _ in ws.paths] == [0, 1, 2, 3]
    assert stream.waits.then is None  # the hook does not outlive the run
    stream.waits.close()


class LoggingSocket(AckingSocket):
    """An AckingSocket that logs each write by session name, acked only when the test says."""

    def __init__(self, name: str, log: list[str], stream_of: list[SessionStream]) -> None:
        super().__init__(stream_of)
        self.name, self.log = name, log
        self.silent_from = 0  # no automatic acks
        self.closed_at: set[int] = set()  # frame indices at which the socket cannot write

    def can_send_now(self) -> bool:
        return len(self.paths) not in self.closed_at

    def _arrived(self, data: bytes, path: str) -> None:
        super()._arrived(data, path)
        self.log.append(f"write {self.name} {decode_frame(data)[0].index} {path}")

    def ack(self, index: int) -> None:
        self.log.append(f"ack {self.name} {index}")
        self._ack(index)


async def logged_sessions(tmp_path: Path, names: str, log: list[str]):
    frames, messages = await in_memory(tmp_path, 4)
    sessions = []
    for name in names:
        stream, _, events = await chained_session(frames, messages)
        ws = LoggingSocket(name, log, [stream])
        stream.ws = ws
        sessions.append((stream, ws, events))
    return frames, sessions


async def test_frames_sent_on_from_acks_are_written_together_after_the_loops_turn(tmp_path):
    """Acks handled in one turn of the event loop each queue their session's next frame;
    the frames are written once every ack of the turn was handled, in that order."""
    log: list[str] = []
    frames, sessions = await logged_sessions(tmp_path, "ab", log)
    plays = [asyncio.ensure_future(s.play_frames(frame_items(frames))) for s, _, _ in sessions]
    await asyncio.sleep(0)
    assert log == ["write a 0 awaited", "write b 0 awaited"]
    for index in range(3):
        log.clear()
        for _, ws, _ in sessions:
            ws.ack(index)
        acks = [f"ack a {index}", f"ack b {index}"]
        assert log == acks  # nothing written yet
        await asyncio.sleep(0)
        assert log == [*acks, f"write a {index + 1} at once", f"write b {index + 1} at once"]
    for _, ws, _ in sessions:
        ws.ack(3)
    await asyncio.wait_for(asyncio.gather(*plays), 1)
    for _, _, events in sessions:
        assert [(e.kind, e.payload.index) for e in events] == [
            (kind, k) for k in range(4) for kind in (EventKind.FRAME_SENT, EventKind.FRAME_ACK)
        ]


async def test_a_queued_frame_the_socket_cannot_take_at_its_turn_is_sent_by_the_session(
    tmp_path,
):
    log: list[str] = []
    frames, [(stream, ws, events)] = await logged_sessions(tmp_path, "a", log)
    play = asyncio.ensure_future(stream.play_frames(frame_items(frames)))
    await asyncio.sleep(0)
    ws.ack(0)  # frame 1 is queued while the socket can write ...
    ws.closed_at = {1}  # ... and at the outbox's turn it cannot
    await asyncio.sleep(0.01)
    ws.closed_at = set()
    ws.silent_from = None  # from here on, acked at once
    ws.ack(1)
    await asyncio.wait_for(play, 1)
    assert [line for line in log if line.startswith("write")] == [
        "write a 0 awaited",
        "write a 1 awaited",
        "write a 2 at once",
        "write a 3 at once",
    ]
    assert [e.payload.index for e in events if e.kind == EventKind.FRAME_SENT] == [0, 1, 2, 3]


async def test_a_session_that_fails_before_its_queued_frame_is_written_writes_nothing(tmp_path):
    log: list[str] = []
    frames, [(stream, ws, events)] = await logged_sessions(tmp_path, "a", log)
    play = asyncio.ensure_future(stream.play_frames(frame_items(frames)))
    await asyncio.sleep(0)
    ws.ack(0)  # frame 1 is queued ...
    failure = SessionFailure(FailureStage.STREAMING, "adapter closed the connection", "adapter")
    stream.waits.fail(failure)  # ... and the session fails in the same turn
    with pytest.raises(SessionFailure):
        await asyncio.wait_for(play, 1)
    assert log == ["write a 0 awaited", "ack a 0"]
    assert [e.kind for e in events] == [EventKind.FRAME_SENT, EventKind.FRAME_ACK]
    stream.waits.close()


# ------------------------------------------------------------------ the response timer


async def test_a_wait_begun_after_the_timer_was_armed_gets_its_whole_timeout():
    loop = asyncio.get_running_loop()
    waits = Waits(0.2)
    first = waits.expect(Awaited.ACK, 0)
    loop.call_later(0.1, waits.resolve, Resolution(Awaited.ACK, 0))
    await waits.wait(first, "frame 0 acknowledgement")  # armed the timer for 0.2 s
    started = loop.time()
    second = waits.expect(Awaited.ACK, 1)
    with pytest.raises(SessionFailure) as timed_out:
        await waits.wait(second, "frame 1 acknowledgement")
    assert loop.time() - started >= 0.2 - 0.01  # not when the first wait's timer ran out
    assert (timed_out.value.stage, timed_out.value.reason, timed_out.value.cause) == (
        FailureStage.RESPONSE,
        "no frame 1 acknowledgement within 0.2s",
        "infrastructure",
    )
    assert waits.failure is None  # a timeout fails the wait, not the session's record
    waits.close()


async def test_many_quick_waits_in_a_row_never_time_out():
    waits = Waits(0.05)
    loop = asyncio.get_running_loop()
    ends = loop.time() + 0.2
    key = 0
    while loop.time() < ends:  # four timeouts long, each wait far shorter than one
        future = waits.expect(Awaited.ACK, key)
        loop.call_later(0.005, waits.resolve, Resolution(Awaited.ACK, key))
        await waits.wait(future, f"frame {key} acknowledgement")
        key += 1
    waits.close()


# ------------------------------------------------------------------ the event writer


def ack(session_id: str, seq: int) -> Event:
    return Event(
        "run", session_id, seq, EventKind.FRAME_ACK, seq, 0.0, example(EventKind.FRAME_ACK)
    )


class BatchLog:
    """A store that only logs the batches it is given."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, int]]] = []

    def append_rows(self, rows, owner=None):
        self.batches.append([(row[1], row[2]) for row in rows])
        return set()


async def test_events_put_one_at_a_time_are_gathered_into_one_batch():
    store = BatchLog()
    # A delay far longer than the puts take even on a loaded machine, waited for by polling.
    writer = EventWriter(store, batch_size=100, max_delay_s=2.0)  # type: ignore[arg-type]
    await writer.start()
    for seq in range(10):
        writer.put(ack("s", seq))
        await asyncio.sleep(0.001)  # the writer is woken by none of them
    assert store.batches == []
    for _ in range(3000):
        if store.batches:
            break
        await asyncio.sleep(0.01)
    assert store.batches == [[("s", seq) for seq in range(10)]]
    await writer.close()


async def test_a_batch_that_fills_is_stored_without_waiting_for_the_delay():
    store = BatchLog()
    writer = EventWriter(store, batch_size=5, max_delay_s=30.0)  # type: ignore[arg-type]
    await writer.start()
    for seq in range(7):
        writer.put(ack("s", seq))
        await asyncio.sleep(0.001)
    for _ in range(100):
        if store.batches:
            break
        await asyncio.sleep(0.01)
    assert store.batches == [[("s", seq) for seq in range(5)]]
    await asyncio.wait_for(writer.flush(), 1.0)  # a flush ends the batch being gathered
    assert store.batches[1:] == [[("s", 5), ("s", 6)]]
    await writer.close()


async def test_trickled_events_of_many_sessions_are_all_stored_in_order(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.create_run("run", "synthetic", {})
        store.add_sessions("run", [(f"s{k}", ["r"]) for k in range(3)])
        writer = EventWriter(store, batch_size=16, max_delay_s=0.02)
        await writer.start()
        for seq in range(60):
            for k in range(3):
                writer.put(ack(f"s{k}", seq))
            if seq % 7 == 0:
                await asyncio.sleep(0.005)
        writer.put_session_status("run", "s0", "finished")
        await writer.close()
        for k in range(3):
            assert [e.seq for e in store.iter_events("run", f"s{k}")] == list(range(60))
        assert store.sessions("run")[0].status == "finished"


# ------------------------------------------------------------------ sessions per endpoint


def test_an_endpoint_takes_more_than_1024_sessions():
    assert EndpointConfig(url="ws://127.0.0.1:1/ws", concurrency=2000).concurrency == 2000
    assert AdapterRegistration(name="m", url="ws://127.0.0.1:1/ws", concurrency=5000)
    assert raise_open_file_limit() > 0


def soft_open_file_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-file limit in /proc")


def test_an_adapter_server_raises_its_own_open_file_limit():
    """Each session is a socket in the adapter too: started with a soft limit of 256 (the
    hard one higher), the adapter serves with the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard open-file limit is {hard}: nothing to raise")

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    command = [sys.executable, "-m", "streameval.adapters", "silent", "--port", "0"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, preexec_fn=low_soft_limit)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith("streameval-adapter listening on")
        expected = hard if hard != resource.RLIM_INFINITY else 256
        assert soft_open_file_limit(child.pid) == expected
    finally:
        child.kill()
        child.wait()


def test_slots_fit_what_the_process_holds():
    assert slots_per_endpoint([3, 5], 100) == [3, 5]
    assert slots_per_endpoint([3000, 1000], 2000) == [1500, 500]
    assert slots_per_endpoint([1, 4000], 100) == [1, 99]


class HoldingRunner:
    """Holds every session it is given until `together` are held at once (or none is
    left to come), then ends them all as finished."""

    def __init__(self, together: int) -> None:
        self.together = together
        self.held = 0
        self.peak = 0
        self.all_held = asyncio.Event()

    async def run_claimed(
        self,
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None] | None = None,
    ) -> SessionOutcome:
        self.held += 1
        self.peak = max(self.peak, self.held)
        if self.held >= self.together:
            self.all_held.set()
        await asyncio.wait_for(self.all_held.wait(), 60)
        self.held -= 1
        writer.put_session_status(session.run_id, session.session_id, "finished")
        return SessionOutcome(session.session_id, "finished")


def worker_run(tmp_path: Path, sessions: int, concurrency: int, capacity: int | None):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    store.create_run("run", "synthetic", {})
    store.add_sessions("run", [(f"s{k:05d}", ["r"]) for k in range(sessions)])
    runner = HoldingRunner(min(sessions, concurrency, capacity or sessions))

    async def runner_for(_run_id: str) -> HoldingRunner:
        return runner

    endpoint = EndpointConfig(url="ws://127.0.0.1:1/ws", concurrency=concurrency)
    worker = Worker(store, [endpoint], runner_for, poll_s=0.01, capacity=capacity)
    return store, runner, worker


async def test_one_endpoint_serves_1100_sessions_at_once(tmp_path):
    store, runner, worker = worker_run(tmp_path, 1100, 1100, None)
    with store:
        summary = await worker.run("run")
        assert (summary.finished, runner.peak) == (1100, 1100)
        assert {s.status for s in store.sessions("run")} == {"finished"}


async def test_a_worker_runs_no_more_sessions_at_once_than_it_can_hold(tmp_path):
    store, runner, worker = worker_run(tmp_path, 30, 50, 10)
    with store:
        summary = await worker.run("run")
        assert (summary.finished, runner.peak) == (30, 10)


class SlowStore(Store):
    """Appends take longer than a lease: ended sessions wait in the writer's queue."""

    def append_rows(self, rows, owner=None):
        threading.Event().wait(1.2)
        return super().append_rows(rows, owner)


class OnceRunner:
    def __init__(self) -> None:
        self.runs: list[str] = []

    async def run_claimed(
        self,
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None] | None = None,
    ) -> SessionOutcome:
        self.runs.append(session.session_id)
        payload = example(EventKind.FRAME_ACK)
        writer.put(
            Event(session.run_id, session.session_id, 0, EventKind.FRAME_ACK, 0, 0.0, payload)
        )
        writer.put_session_status(session.run_id, session.session_id, "finished")
        return SessionOutcome(session.session_id, "finished")


async def test_a_session_keeps_its_lease_until_its_end_is_stored(tmp_path):
    with SlowStore(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.create_run("run", "synthetic", {})
        store.add_sessions("run", [("s0", ["r"]), ("s1", ["r"])])
        runner = OnceRunner()

        async def runner_for(_run_id: str) -> OnceRunner:
            return runner

        # A third slot looks for work (an expired lease) while the two ended sessions wait
        # for the slow store, longer than a lease.
        endpoint = EndpointConfig(url="ws://127.0.0.1:1/ws", concurrency=3)
        worker = Worker(store, [endpoint], runner_for, lease_s=0.6, poll_s=0.05)
        summary = await worker.run("run")
        assert sorted(runner.runs) == ["s0", "s1"]  # none run twice
        assert (summary.finished, summary.lost) == (2, 0)
        assert {s.status for s in store.sessions("run")} == {"finished"}


# ------------------------------------------------------------------ the store process


def store_with_sessions(path: Path, sessions: int = 2) -> Store:
    store = Store(f"sqlite:///{path}")
    store.create_run("run", "synthetic", {})
    store.add_sessions("run", [(f"s{k}", ["r"]) for k in range(sessions)])
    return store


def test_the_store_process_stores_in_order_and_answers_once_committed(tmp_path):
    with store_with_sessions(tmp_path / "store.db") as store:
        url = child_url(store)
        assert url is not None
        child = StoreProcess(url)
        try:
            assert url not in " ".join(child._child.args)  # never on the command line
            child.append_rows([event_row(ack("s0", seq)) for seq in range(3)])
            assert [e.seq for e in store.iter_events("run", "s0")] == [0, 1, 2]
            assert child.set_session_status("run", "s0", "finished", endpoint="ws://a") is True
            s0 = store.sessions("run")[0]
            assert (s0.status, s0.endpoint) == ("finished", "ws://a")
            stored = next(store.iter_events("run", "s0"))
            assert stored == ack("s0", 0)  # the payload came through its JSON unchanged
            with pytest.raises(StoreError, match="UNIQUE|duplicate|unique") as duplicate:
                child.append_rows([event_row(ack("s0", 2))])
            assert not isinstance(duplicate.value, StoreLost)
        finally:
            child.close()
        assert child._child.returncode == 0


def test_the_store_process_reports_a_deleted_store_as_lost(tmp_path):
    path = tmp_path / "store.db"
    with store_with_sessions(path) as store:
        child = StoreProcess(child_url(store) or "")
        try:
            child.append_rows([event_row(ack("s0", 0))])
            for leftover in tmp_path.glob("store.db*"):
                leftover.unlink()
            with pytest.raises(StoreLost, match="was deleted while open"):
                child.append_rows([event_row(ack("s0", 1))])
        finally:
            child.close()


def test_a_store_process_that_ended_fails_the_call(tmp_path):
    with store_with_sessions(tmp_path / "store.db") as store:
        child = StoreProcess(child_url(store) or "")
        child._child.kill()
        child._child.wait()
        with pytest.raises(StoreError, match="the store writer process ended"):
            child.append_rows([event_row(ack("s0", 0))])
        child.close()


def test_an_in_memory_store_keeps_its_writes_in_process():
    with Store("sqlite://") as store:
        assert child_url(store) is None


async def test_a_large_worker_stores_through_its_own_process(tmp_path, monkeypatch):
    started: list[str] = []
    original = StoreProcess.__init__

    def spy(self: StoreProcess, url: str) -> None:
        started.append(url)
        original(self, url)

    monkeypatch.setattr(StoreProcess, "__init__", spy)
    store, runner, worker = worker_run(tmp_path, 80, 80, None)
    with store:
        summary = await worker.run("run")
        assert summary.finished == 80
        assert {s.status for s in store.sessions("run")} == {"finished"}
    assert len(started) == 1
    (tmp_path / "small").mkdir()
    small, _, few = worker_run(tmp_path / "small", 3, 3, None)
    with small:
        await few.run("run")
    assert len(started) == 1  # a few sessions at once store from the worker's own thread


# ------------------------------------------------------------------ ending many sessions


async def test_slots_that_end_after_the_queue_ran_dry_do_not_ask_the_store_again(tmp_path):
    store, _, worker = worker_run(tmp_path, 20, 20, None)
    calls = {"claim": 0, "outstanding": 0}
    dry = asyncio.Event()
    loop = asyncio.get_running_loop()

    class OneEndsFirst:
        """s0 ends at once; the others once its slot found the queue empty."""

        async def run_claimed(self, session, endpoint, writer, frames_ready=None):
            if session.session_id != "s00000":
                await dry.wait()
                await asyncio.sleep(0.05)
            writer.put_session_status(session.run_id, session.session_id, "finished")
            return SessionOutcome(session.session_id, "finished")

    async def runner_for(_run_id: str) -> OneEndsFirst:
        return OneEndsFirst()

    worker.runner_for = runner_for
    for name in calls:
        method = getattr(worker.queue, name)

        def counted(*args, _method=method, _name=name):
            calls[_name] += 1
            found = _method(*args)
            if _name == "outstanding":
                loop.call_soon_threadsafe(dry.set)
            return found

        setattr(worker.queue, name, counted)
    with store:
        summary = await worker.run("run")
    assert summary.finished == 20
    # 20 claims that took a session, one that found none; the other 19 slots stop at once.
    assert calls == {"claim": 21, "outstanding": 1}


# ------------------------------------------------------------------ collector pauses


def test_full_collections_are_rarer_while_workers_run_and_restored_after():
    before = gc.get_threshold()
    with fewer_pauses():
        young, middle, old = gc.get_threshold()
        assert (young, middle) == before[:2] and old == before[2] * 100
        assert gc.get_freeze_count() > 0
        with fewer_pauses():  # a second worker in the process
            pass
        assert gc.get_threshold()[2] == before[2] * 100  # still running: kept
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


FRAME_SENT_CASES = [
    dict(index=0, frame_id="v:0", t=0.0, source_t=None, scheduled_ns=None, lag_ns=None),
    dict(
        index=7, frame_id='clip "a"\\é:7', t=0.1 + 0.2, source_t=7.0, scheduled_ns=None, lag_ns=None
    ),
    dict(
        index=10**12,
        frame_id="x\n\t\u2028",
        t=1e-7,
        source_t=3600.25,
        scheduled_ns=2**62,
        lag_ns=-1_500,
    ),
    dict(index=3, frame_id="", t=86_400.123456789, source_t=1e21, scheduled_ns=0, lag_ns=0),
]


@pytest.mark.parametrize("fields", FRAME_SENT_CASES)
def test_a_frame_sent_row_is_the_row_of_the_validated_event(fields):
    """The Recorder writes frame_sent's JSON itself: what the store reads back from it is
    what the validated event would have stored, column for column."""
    rows: list = []
    recorder = Recorder("run", "s", rows.append)
    recorder.seq = 4
    sizes = dict(nbytes=14_000, width=320, height=180)
    recorder.frame_sent(123, 9.5, frame_sent_payload(**fields, **sizes))
    (row,) = rows
    payload = {**fields, "bytes": 14_000, "width": 320, "height": 180}
    expected = event_row(Event("run", "s", 4, EventKind.FRAME_SENT, 123, 9.5, payload))
    assert row[:6] == expected[:6]
    assert json.loads(row[6]) == json.loads(expected[6])
    assert read_payload("frame_sent", row[6]) == read_payload("frame_sent", expected[6])


def test_a_frame_ack_row_is_the_row_of_the_validated_event():
    rows: list = []
    Recorder("run", "s", rows.append).frame_ack(5, None, 41)
    assert rows == [event_row(Event("run", "s", 0, EventKind.FRAME_ACK, 5, None, {"index": 41}))]


def test_a_frame_without_a_finite_time_is_refused_not_stored():
    with pytest.raises(ValueError, match="frame 2 has no finite time stamp"):
        frame_sent_payload(
            **FRAME_SENT_CASES[0] | {"index": 2, "t": float("nan")}, nbytes=1, width=1, height=1
        )


def test_a_shared_message_carries_the_frame_sent_payload_of_its_plain_delivery():
    """Made once with the message, read by every session that sends it as sampled."""
    ref = FrameRef(
        index=7, source_index=7, t=3.5, frame_id='clip "a":7', width=320, height=180, nbytes=6
    )
    message = build_message(ref, b"\xff\xd8jpeg")
    plain = dict(index=7, frame_id='clip "a":7', t=3.5, source_t=None)
    unscheduled = dict(scheduled_ns=None, lag_ns=None, nbytes=6, width=320, height=180)
    assert message.sent_as_sampled == frame_sent_payload(**plain, **unscheduled)
    # A retimed copy keeps it (it is never sent as sampled) and carries the new time.
    moved = retimed(message, 4.0)
    assert moved.sent_as_sampled == message.sent_as_sampled
    assert decode_frame(moved.data)[0].t == 4.0


FRAMED_SIZES = [0, 1, 125, 126, 14_000, 65_535, 65_536, 300_000]


def framed_messages() -> list[str | bytes]:
    """Text and binary messages of every length class (7-bit, 16-bit and 64-bit)."""
    binary: list[str | bytes] = [random.Random(size).randbytes(size) for size in FRAMED_SIZES]
    text: list[str | bytes] = ["é" * (size // 2) + "x" * (size % 2) for size in FRAMED_SIZES]
    return [message for pair in zip(binary, text, strict=True) for message in pair]


async def test_messages_a_client_frames_here_reach_a_websockets_server_intact():
    """The Core's messages are framed and masked by fast_send, not by websockets: a plain
    websockets server reads every one back intact."""
    messages = framed_messages()
    received: list[str | bytes] = []
    done = asyncio.Event()

    async def handler(ws) -> None:
        async for message in ws:
            received.append(message)
            if len(received) == len(messages):
                done.set()

    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None) as ws:
            for message in messages:
                await send_message(ws, message)
            await asyncio.wait_for(done.wait(), 10)
    assert received == messages


async def test_messages_a_server_frames_here_reach_a_websockets_client_intact():
    """An adapter's messages (unmasked, as a server's are) read back by a plain client."""
    messages = framed_messages()

    async def handler(ws) -> None:
        for message in messages:
            await send_message(ws, message)
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        url = f"ws://127.0.0.1:{port}"
        async with connect(url, compression=None, max_size=None) as ws:
            received = [await asyncio.wait_for(ws.recv(), 10) for _ in messages]
    assert received == messages


def test_masking_keys_are_four_bytes_drawn_a_block_at_a_time(monkeypatch):
    draws: list[int] = []

    def urandom(size: int) -> bytes:
        draws.append(size)
        return bytes(range(len(draws) * 16, len(draws) * 16 + size))

    monkeypatch.setattr(fast_send.os, "urandom", urandom)
    keys = fast_send.MaskingKeys(block=8)
    assert [keys.next() for _ in range(3)] == [
        bytes([16, 17, 18, 19]),
        bytes([20, 21, 22, 23]),
        bytes([32, 33, 34, 35]),
    ]
    assert draws == [8, 8]


async def sent_until_one_waits(
    ws, message: bytes, wait_s: float, limit: int
) -> tuple[int, asyncio.Future[None]]:
    """Send `message` with send_message until one send has not returned within `wait_s`:
    how many went through, and the one still waiting. Fails past `limit` sends."""
    sent = 0
    while True:
        pending = asyncio.ensure_future(send_message(ws, message))
        done, _ = await asyncio.wait({pending}, timeout=wait_s)
        if not done:
            return sent, pending
        sent += 1
        assert sent < limit, "the writes never waited"


async def test_a_frame_sent_to_a_peer_that_stops_reading_waits_like_send_does():
    """send_message writes at once only while the connection's buffer has room: against
    an adapter that stops reading it waits, as `send` does, instead of buffering every
    frame in the Core's memory; and on a closed connection it raises as `send` does."""
    reading = asyncio.Event()
    received: list[int] = []

    async def handler(ws) -> None:
        await reading.wait()
        async for message in ws:
            received.append(len(message))

    message = bytes(1 << 20)
    async with serve(handler, "127.0.0.1", 0, max_size=None, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None) as ws:
            sent, pending = await sent_until_one_waits(ws, message, 0.3, limit=200)
            assert ws.paused
            assert ws.transport.get_write_buffer_size() < 4 * len(message)
            reading.set()
            await asyncio.wait_for(pending, 10)
            await send_message(ws, b"last")
            await ws.close()
            with pytest.raises(ConnectionClosed):
                await send_message(ws, b"after close")
        await asyncio.sleep(0.1)
    assert received == [len(message)] * (sent + 1) + [4]

"""The two pacings, the send side's wait and the send path, without a socket.

A `FakeStream` stands in for the session's send path: it logs what the pacing asks, and
answers (or not) through a real `Waits`. Wall-clock pacing runs on a fake monotonic clock
whose `sleep` advances time and whose sends cost what a test says, so lag and drops are
exact numbers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from streameval.core.benchmark.records import ProactiveRecord, Probe, QARecord
from streameval.core.frames.types import FrameRef
from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.frame_messages import FrameMessages
from streameval.core.session.pacing import LogicalPacing, VideoClock, WallClockPacing, pacing_for
from streameval.core.session.protocol_state import Awaited, ProtocolState, Resolution
from streameval.core.session.recorder import Recorder
from streameval.core.session.sender import SessionStream
from streameval.core.session.waiting import Waits
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import Timeline, TimelineItem
from streameval.events import Event, EventKind
from tests.recording import reading_into

S = 1_000_000_000  # ns per second


def frame(index: int, t: float | None = None) -> TimelineItem:
    t = float(index) if t is None else t
    return TimelineItem("frame", t, FrameRef(index, index, t, f"v:{index}", 4, 2, 3))


def step(index: int, t: float) -> TimelineItem:
    return TimelineItem("step", t, step=index)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def now_ns(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += round(seconds * S)


class FakeStream:
    """Logs the pacing's calls; an `answering` stream resolves each wait as soon as what
    it waits for has been sent, as an instant adapter would."""

    def __init__(
        self,
        *,
        answering: bool = True,
        clock: FakeClock | None = None,
        send_cost_ns: dict[int, int] | None = None,
        timeout_s: float = 1.0,
    ) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.waits = Waits(timeout_s)
        self.answering = answering
        self.clock = clock
        self.send_cost_ns = send_cost_ns or {}
        self.response_open = False
        self.pending: Resolution | None = None

    def _answer(self) -> None:
        if self.answering and self.pending is not None:
            self.waits.resolve(self.pending)

    async def send_frame(self, item, *, scheduled_ns, lag_ns) -> None:
        self.calls.append(("frame", item.frame.index, scheduled_ns, lag_ns))
        if self.clock is not None:
            self.clock.now += self.send_cost_ns.get(item.frame.index, 0)
        self._answer()

    async def play_frames(self, items) -> None:
        self.calls.append(("frames", [item.frame.index for item in items]))
        for item in items:
            waiter = self.expect(Awaited.ACK, item.frame.index)
            await self.send_frame(item, scheduled_ns=None, lag_ns=None)
            await self.wait(waiter, f"frame {item.frame.index} acknowledgement")

    def drop_frame(self, item, *, scheduled_ns, lag_ns) -> None:
        self.calls.append(("drop", item.frame.index, scheduled_ns, lag_ns))

    async def send_step(self, item) -> None:
        self.calls.append(("step", item.step))
        self._answer()

    async def send_task(self, item) -> None:
        self.calls.append((item.kind, item.t))
        self._answer()

    def expect(self, awaited: Awaited, key: int | None = None) -> asyncio.Future[None]:
        self.calls.append(("expect", awaited.value, key))
        self.pending = Resolution(awaited, key)
        return self.waits.expect(awaited, key)

    async def wait(self, future: asyncio.Future[None], what: str) -> None:
        self.calls.append(("wait", what))
        # An answer may also come while waiting (the final of a response already open).
        asyncio.get_running_loop().call_soon(self._answer)
        await self.waits.wait(future, what)

    def check(self) -> None:
        self.waits.check()


# ------------------------------------------------------------------ logical


async def test_logical_pacing_waits_for_every_ack_decision_and_answer():
    items = [frame(0), step(0, 0.0), frame(1), TimelineItem("question", 1.0)]
    stream = FakeStream()
    await LogicalPacing().play(items, stream)
    assert stream.calls == [
        ("frames", [0]),
        ("expect", "ack", 0),
        ("frame", 0, None, None),
        ("wait", "frame 0 acknowledgement"),
        ("expect", "decision", 0),
        ("step", 0),
        ("wait", "decision at step 0"),
        ("frames", [1]),
        ("expect", "ack", 1),
        ("frame", 1, None, None),
        ("wait", "frame 1 acknowledgement"),
        ("expect", "decision", None),
        ("question", 1.0),
        ("wait", "answer"),
    ]


async def test_logical_pacing_sends_an_instruction_without_waiting():
    stream = FakeStream()
    await LogicalPacing().play([frame(0), TimelineItem("instruction", 0.0)], stream)
    assert stream.calls[-1] == ("instruction", 0.0)
    assert ("wait", "answer") not in stream.calls


async def test_logical_pacing_stops_at_an_ack_that_never_comes():
    stream = FakeStream(answering=False, timeout_s=0.01)
    with pytest.raises(SessionFailure) as caught:
        await LogicalPacing().play([frame(0), frame(1)], stream)
    failure = caught.value
    assert (failure.stage, failure.reason, failure.cause) == (
        FailureStage.RESPONSE,
        "no frame 0 acknowledgement within 0.01s",
        "infrastructure",
    )
    assert [call[0] for call in stream.calls] == ["frames", "expect", "frame", "wait"]


async def test_logical_pacing_hands_over_each_run_of_consecutive_frames():
    items = [frame(0), frame(1), frame(2), step(0, 2.0), frame(3), TimelineItem("cut", 3.0)]
    items += [frame(4), frame(5)]
    stream = FakeStream()
    stream.cut = lambda item: asyncio.sleep(0, stream.calls.append(("cut", item.t)))
    await LogicalPacing().play(items, stream)
    assert [call for call in stream.calls if call[0] in ("frames", "step", "cut")] == [
        ("frames", [0, 1, 2]),
        ("step", 0),
        ("frames", [3]),
        ("cut", 3.0),
        ("frames", [4, 5]),
    ]


# ------------------------------------------------------------------ wall clock


def wall_clock(clock: FakeClock, *, speed: float = 1.0, initiation: str = "polled"):
    return WallClockPacing(speed, initiation, VideoClock(speed), clock.now_ns, clock.sleep)


async def test_wall_clock_sends_frames_on_schedule_and_never_waits_for_acks():
    clock = FakeClock()
    clock.now = 7 * S
    items = [frame(0, 2.0), step(0, 2.0), frame(1, 3.0), step(1, 3.0), frame(2, 4.0)]
    stream = FakeStream(clock=clock)
    pacing = wall_clock(clock, speed=2.0)
    await pacing.play(items, stream)
    # Origin: the first item's time at the start's runtime; 1 s of video every 0.5 s.
    assert pacing.clock.origin == (7 * S, 2.0)
    assert stream.calls == [
        ("frame", 0, 7 * S, 0),
        ("step", 0),
        ("frame", 1, 7 * S + S // 2, 0),
        ("step", 1),
        ("frame", 2, 8 * S, 0),
    ]
    assert clock.now == 8 * S
    assert pacing.clock.at(clock.now) == 4.0


async def test_wall_clock_drops_a_frame_whose_successor_is_due_and_records_lag():
    clock = FakeClock()
    # Sending frame 0 takes 2.5 s: frame 1 (due at 1 s) is late and frame 2 already due.
    stream = FakeStream(clock=clock, send_cost_ns={0: 5 * S // 2})
    await wall_clock(clock).play([frame(index) for index in range(4)], stream)
    assert stream.calls == [
        ("frame", 0, 0, 0),
        ("drop", 1, 1 * S, S + S // 2),
        ("frame", 2, 2 * S, S // 2),
        ("frame", 3, 3 * S, 0),
    ]


async def test_wall_clock_keeps_the_last_of_frames_due_together():
    clock = FakeClock()
    stream = FakeStream(clock=clock)
    items = [frame(index, 0.0) for index in range(3)]
    await wall_clock(clock).play(items, stream)
    assert [call[:2] for call in stream.calls] == [("drop", 0), ("drop", 1), ("frame", 2)]


async def test_wall_clock_sends_no_steps_to_an_autonomous_adapter():
    clock = FakeClock()
    stream = FakeStream(clock=clock)
    items = [frame(0), TimelineItem("instruction", 0.0), step(0, 0.0), frame(1), step(1, 1.0)]
    await wall_clock(clock, initiation="autonomous").play(items, stream)
    assert [call[0] for call in stream.calls] == ["frame", "instruction", "frame"]


async def test_wall_clock_awaits_only_the_answer_at_the_end():
    clock = FakeClock()
    stream = FakeStream(clock=clock)
    await wall_clock(clock).play([frame(0), TimelineItem("question", 0.0), frame(1)], stream)
    assert stream.calls == [
        ("frame", 0, 0, 0),
        ("expect", "decision", None),
        ("question", 0.0),
        ("frame", 1, S, 0),
        ("wait", "answer"),
    ]


@pytest.mark.parametrize("response_open", [False, True])
async def test_wall_clock_lets_an_open_response_finish(response_open):
    clock = FakeClock()
    stream = FakeStream(clock=clock)
    stream.response_open = response_open
    await wall_clock(clock).play([frame(0), step(0, 0.0)], stream)
    tail = [("expect", "decision", None), ("wait", "final of the open response")]
    assert (stream.calls[-2:] == tail) is response_open


async def test_wall_clock_stops_at_a_failure_before_the_next_item():
    clock = FakeClock()
    stream = FakeStream(clock=clock)
    stream.waits.fail(SessionFailure(FailureStage.ADAPTER, "adapter error x: y", "adapter"))
    with pytest.raises(SessionFailure, match="adapter error x: y"):
        await wall_clock(clock).play([frame(0), frame(1)], stream)
    assert stream.calls == []


def test_pacing_for_names_the_strategy():
    clock = VideoClock(2.0)
    assert isinstance(
        pacing_for("logical", speed=2.0, initiation="polled", clock=clock), LogicalPacing
    )
    wall = pacing_for("wall_clock", speed=2.0, initiation="autonomous", clock=clock)
    assert isinstance(wall, WallClockPacing)
    assert (wall.speed, wall.initiation, wall.clock) == (2.0, "autonomous", clock)


def test_video_clock_follows_frames_then_the_wall_clock_origin():
    clock = VideoClock(speed=4.0)
    assert clock.at(123) is None
    clock.frame_sent(3.0)
    assert clock.at(123) == 3.0
    clock.start(10 * S, 2.0)
    assert clock.at(11 * S) == 6.0


# ------------------------------------------------------------------ waits


async def test_a_wait_resolves_only_for_what_it_expects():
    waits = Waits(1.0)
    future = waits.expect(Awaited.ACK, 2)
    waits.resolve(Resolution(Awaited.ACK, 1))
    waits.resolve(Resolution(Awaited.DECISION))
    assert not future.done()
    waits.resolve(Resolution(Awaited.ACK, 2))
    await waits.wait(future, "frame 2 acknowledgement")


async def test_the_first_failure_wins_and_wakes_the_waiter():
    waits = Waits(1.0)
    future = waits.expect(Awaited.DECISION)
    first = SessionFailure(
        FailureStage.STREAMING, "adapter closed the connection", "infrastructure"
    )
    waits.fail(first)
    waits.fail(SessionFailure(FailureStage.PROTOCOL, "later", "adapter"))
    with pytest.raises(SessionFailure) as caught:
        await waits.wait(future, "answer")
    assert caught.value is first
    assert waits.failure is first
    with pytest.raises(SessionFailure):
        waits.expect(Awaited.CLOSED)


# ------------------------------------------------------------------ the send path


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[str | bytes] = []

    async def send(self, message: str | bytes) -> None:
        self.sent.append(message)

    async def send_frame(self, data: bytes) -> None:
        self.sent.append(data)

    def can_send_now(self) -> bool:
        return True

    def send_now(self, data: bytes) -> None:
        self.sent.append(data)


class FakeFrames:
    directory = Path("/fake-frames")
    frames: tuple[FrameRef, ...] = ()

    def read(self, ref: FrameRef) -> bytes:
        return b"jpeg"


def stream_for(record: QARecord | ProactiveRecord):
    plan = SessionPlan(
        "run", record.record_id, record, Timeline(record.record_id, "qa", ()), FakeFrames()
    )  # type: ignore[arg-type]
    events: list[Event] = []
    protocol, clock, ws = ProtocolState(), VideoClock(), FakeSocket()
    recorder = Recorder("run", record.record_id, reading_into(events))
    stream = SessionStream(ws, plan, recorder, protocol, Waits(1.0), clock, FrameMessages())
    return stream, events, protocol, ws


QA = QARecord(
    record_id="q1",
    source_id="s",
    source_benchmark="b",
    task_type="x",
    video_path="v.mp4",
    question="What?",
    options=("A. a", "B. b"),
    answer="A",
    question_time_s=1.0,
    evidence_anchor_s=0.0,
)


async def test_the_send_path_tells_the_state_machine_and_records_what_went_out():
    stream, events, protocol, ws = stream_for(QA)
    await stream.send_frame(frame(0, 0.5), scheduled_ns=None, lag_ns=None)
    await stream.send_task(TimelineItem("question", 1.0))
    assert protocol.sent_frames == {0} and protocol.known_tasks == {"q1"}
    assert isinstance(ws.sent[0], bytes) and '"type":"question"' in str(ws.sent[1])
    sent, asked = events
    assert (sent.seq, sent.kind, sent.video_t) == (0, EventKind.FRAME_SENT, 0.5)
    assert (asked.seq, asked.kind, asked.video_t) == (1, EventKind.QUESTION_SENT, 0.5)


async def test_a_probe_is_asked_under_its_own_task_id():
    probed = ProactiveRecord(
        record_id="p1",
        source_id="s",
        source_benchmark="b",
        task_type="x",
        video_path="v.mp4",
        instruction="Watch",
        instruction_time_s=0.0,
        triggers=(),
        probes=(Probe(t=1.0, question="How many?", answer="2"),),
    )
    stream, events, protocol, _ = stream_for(probed)
    await stream.send_task(TimelineItem("question", 1.0, probe=0))
    assert protocol.known_tasks == {"p1#probe0"}
    assert events[0].kind == EventKind.QUESTION_SENT

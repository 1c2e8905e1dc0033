"""The session's send path: what a pacing drives.

`SessionStream` turns timeline items into wire messages, tells the protocol state machine
what went out (before it goes, so that an answer arriving at once is legal), records each
`*_sent` event after the send, and exposes the session's one wait to the pacing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.frames.errors import FramesError
from streameval.core.frames.types import FrameRef
from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.frame_chain import FrameChain, FrameOutbox, running_outbox
from streameval.core.session.frame_messages import SHARED, FrameMessage, FrameMessages, retimed
from streameval.core.session.pacing import VideoClock
from streameval.core.session.protocol_state import Awaited, ProtocolState
from streameval.core.session.recorder import Recorder, frame_sent_payload
from streameval.core.session.waiting import Waits, ack_wait
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import TimelineItem
from streameval.events import EventKind, FailureCause, probe_task_id
from streameval.protocol import (
    AUDIO_SAMPLE_BYTES,
    MAX_MESSAGE_BYTES,
    AudioConditions,
    AudioHeader,
    Instruction,
    Question,
    Step,
    encode_frame,
)


class Socket(Protocol):
    async def send(self, message: str | bytes) -> None: ...

    async def send_frame(self, data: bytes) -> None: ...

    def can_send_now(self) -> bool: ...

    def send_now(self, data: bytes) -> None: ...


# The session driver's reconnect at a `cut` item: given the item and the last frame sent
# before it, it drops the socket and returns the new one, the session started again.
Reconnect = Callable[[TimelineItem, FrameRef | None], Awaitable[Socket]]


class SessionStream:
    """Implements `pacing.Stream` over one connected socket."""

    def __init__(
        self,
        ws: Socket,
        plan: SessionPlan,
        recorder: Recorder,
        protocol: ProtocolState,
        waits: Waits,
        clock: VideoClock,
        messages: FrameMessages = SHARED,
        reconnect: Reconnect | None = None,
        audio: AudioConditions | None = None,
    ) -> None:
        self.ws = ws
        self.audio = audio  # how the session's sound goes out, when it streams any
        self.reconnect = reconnect
        self.last_frame: FrameRef | None = None
        self.messages = messages
        self.plan = plan
        self.recorder = recorder
        self.protocol = protocol
        self.waits = waits
        self.clock = clock
        self.task_id: str = plan.record.record_id
        self._outbox: FrameOutbox | None = None  # the loop's, found at the first chain

    # ------------------------------------------------------------------ sending

    async def send_frame(
        self, item: TimelineItem, *, scheduled_ns: int | None, lag_ns: int | None
    ) -> None:
        assert item.frame is not None
        ref = item.frame
        message = self.messages.cached(self.plan.frames, ref) or await self._read(ref)
        # A perturbed frame (robustness run) goes out with its own time stamp; the event's
        # video time stays the sample's, where the scorer places what the adapter saw.
        moved = item.t != ref.t
        if moved:
            message = retimed(message, item.t)
        self._sending(ref)
        await self.ws.send_frame(message.data)
        self._sent(item, message, scheduled_ns, lag_ns)

    async def play_frames(self, items: Sequence[TimelineItem]) -> None:
        """Logical pacing's consecutive frames: each sent once the one before it is
        acknowledged, and each ack waited for up to the response timeout.

        After the first frame, each ack's handler sends the next frame on itself
        (frame_chain.py) while this coroutine waits once for the whole chain, so a frame
        costs no future, no task wake-up and no coroutines. A frame the handler cannot send
        at once (not in memory, retimed, a full write buffer) ends the chain and is sent
        from here like the first."""
        position = 0
        while position < len(items):
            item = items[position]
            assert item.frame is not None
            waiter = self.expect(Awaited.ACK, item.frame.index)
            await self.send_frame(item, scheduled_ns=None, lag_ns=None)
            chain = FrameChain(self, items, position + 1)
            self.waits.then = chain.send_next
            try:
                await self.wait(waiter, ack_wait(item.frame.index))
            finally:
                self.waits.then = None
            position = chain.position

    def ready_message(self, item: TimelineItem) -> FrameMessage | None:
        """A frame's message if the frame can go without waiting: the message is in memory
        with the sample's own time stamp and the socket's write buffer has room."""
        ref = item.frame
        assert ref is not None
        if item.t != ref.t or not self.ws.can_send_now():
            return None
        return self.messages.cached(self.plan.frames, ref)

    def write_queued(self, item: TimelineItem, message: FrameMessage) -> bool:
        """Write a frame a chain queued (`ready_message` gave its message); False when the
        socket can no longer take it at once: the wait is answered, and `play_frames` sends
        the frame itself. Nothing is written to a session that failed meanwhile."""
        if self.waits.failure is not None:
            return False
        if not self.ws.can_send_now():
            self.waits.settle()
            return False
        assert item.frame is not None
        self._sending(item.frame)
        self.ws.send_now(message.data)
        self._sent(item, message, None, None)
        return True

    @property
    def outbox(self) -> FrameOutbox:
        if self._outbox is None:
            self._outbox = running_outbox()
        return self._outbox

    def _sending(self, ref: FrameRef) -> None:
        self.protocol.frame_sent(ref.index)
        self.clock.frame_sent(ref.t)
        self.last_frame = ref

    def _sent(
        self,
        item: TimelineItem,
        message: FrameMessage,
        scheduled_ns: int | None,
        lag_ns: int | None,
    ) -> None:
        ref = message.ref
        moved = item.t != ref.t
        if moved or scheduled_ns is not None or lag_ns is not None:
            payload = frame_sent_payload(
                index=ref.index,
                frame_id=ref.frame_id,
                t=item.t,
                source_t=ref.t if moved else None,
                scheduled_ns=scheduled_ns,
                lag_ns=lag_ns,
                nbytes=message.nbytes,
                width=ref.width,
                height=ref.height,
            )
        else:
            payload = message.sent_as_sampled
        self.recorder.frame_sent(time.monotonic_ns(), ref.t, payload)

    async def _read(self, ref: FrameRef) -> FrameMessage:
        """The sample's message, its JPEG read from the Core's frame cache off the event
        loop. A sample that cannot be read is the Core's fault, not the adapter's: the
        session fails at stage `frames` with the error's cause (infrastructure for the
        cache), before anything of it is sent."""
        frames = self.plan.frames
        try:
            return await self.messages.get(frames, ref)
        except FramesError as exc:
            frames.discard()  # rebuilt for the next session, not failed again
            self.messages.forget(frames.directory)
            raise SessionFailure(FailureStage.FRAMES, str(exc), exc.cause) from None

    async def send_audio(
        self, item: TimelineItem, *, scheduled_ns: int | None, lag_ns: int | None
    ) -> None:
        """An audio chunk, cut from the video's cached sound; the same bytes under both
        pacings, since they depend on the chunk's index alone."""
        assert item.chunk is not None and self.audio is not None and self.plan.audio is not None
        pcm, silent = self.plan.audio.chunk(item.chunk, self.audio.chunk_s)
        header = AudioHeader(
            index=item.chunk,
            start_t=item.chunk * self.audio.chunk_s,
            t=item.t,
            sample_rate=self.audio.sample_rate,
            samples=len(pcm) // AUDIO_SAMPLE_BYTES,
            silent=silent,
            nbytes=len(pcm),
        )
        self.protocol.audio_sent(item.chunk)
        await self.ws.send_frame(encode_frame(header, pcm))
        self.recorder.record(
            EventKind.AUDIO_SENT,
            time.monotonic_ns(),
            item.t,
            index=header.index,
            start_t=header.start_t,
            t=header.t,
            sample_rate=header.sample_rate,
            samples=header.samples,
            bytes=header.nbytes,
            silent=silent,
            scheduled_ns=scheduled_ns,
            lag_ns=lag_ns,
        )

    def drop_frame(self, item: TimelineItem, *, scheduled_ns: int, lag_ns: int) -> None:
        assert item.frame is not None
        self.recorder.record(
            EventKind.FRAME_DROPPED,
            time.monotonic_ns(),
            item.t,
            index=item.frame.index,
            frame_id=item.frame.frame_id,
            t=item.t,
            scheduled_ns=scheduled_ns,
            lag_ns=lag_ns,
        )

    async def send_step(self, item: TimelineItem) -> None:
        assert item.step is not None
        self.protocol.step_sent(self.task_id)
        await self.ws.send(Step(task_id=self.task_id, step=item.step, t=item.t).model_dump_json())
        self.recorder.record(
            EventKind.STEP_SENT,
            time.monotonic_ns(),
            self.clock.current_t,
            task_id=self.task_id,
            step=item.step,
            t=item.t,
        )

    async def send_task(self, item: TimelineItem) -> None:
        record = self.plan.record
        if item.probe is not None:
            assert isinstance(record, ProactiveRecord)
            probe = record.probes[item.probe]
            task_id = probe_task_id(record.record_id, item.probe)
            await self._send_question(task_id, item.t, probe.question, list(probe.options))
        elif isinstance(record, QARecord):
            await self._send_question(self.task_id, item.t, record.question, list(record.options))
        else:
            await self._send_instruction(record, item.t)

    async def _send_instruction(self, record: ProactiveRecord, t: float) -> None:
        message = self._wire(Instruction(task_id=self.task_id, t=t, text=record.instruction))
        self.protocol.task_sent(self.task_id)
        await self.ws.send(message)
        self.recorder.record(
            EventKind.INSTRUCTION_SENT,
            time.monotonic_ns(),
            self.clock.current_t,
            task_id=self.task_id,
            record_id=record.record_id,
            t=t,
            text=record.instruction,
        )

    async def _send_question(self, task_id: str, t: float, text: str, options: list[str]) -> None:
        message = self._wire(Question(task_id=task_id, t=t, text=text, options=options))
        self.protocol.task_sent(task_id)
        await self.ws.send(message)
        self.recorder.record(
            EventKind.QUESTION_SENT,
            time.monotonic_ns(),
            self.clock.current_t,
            task_id=task_id,
            record_id=self.plan.record.record_id,
            t=t,
            text=text,
            options=options,
        )

    def _wire(self, message: Question | Instruction) -> str:
        """The task's message as sent, or the record's failure (cause `input`) when it is
        over the protocol's message limit: the adapter would refuse it (1009), and no rerun
        helps. Benchmarks are refused at load past MAX_TASK_TEXT_BYTES, well below; this
        catches a run stored before that check."""
        text = message.model_dump_json()
        size = len(text.encode())
        if size > MAX_MESSAGE_BYTES:
            reason = (
                f"record {self.plan.record.record_id}: its {message.type} is {size} bytes as "
                f"sent, over the protocol's limit of {MAX_MESSAGE_BYTES} bytes per message"
            )
            raise SessionFailure(FailureStage.STREAMING, reason, FailureCause.INPUT)
        return text

    async def cut(self, item: TimelineItem) -> None:
        assert self.reconnect is not None, "a timeline with a cut needs a stream that reconnects"
        self.ws = await self.reconnect(item, self.last_frame)

    # ------------------------------------------------------------------ waiting

    def expect(self, awaited: Awaited, key: int | None = None) -> asyncio.Future[None]:
        return self.waits.expect(awaited, key)

    async def wait(self, future: asyncio.Future[None], what: str) -> None:
        await self.waits.wait(future, what)

    def check(self) -> None:
        self.waits.check()

    @property
    def response_open(self) -> bool:
        return self.protocol.response_open

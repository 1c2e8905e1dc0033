"""Drive one session against one adapter endpoint and record everything that happens.

The driver owns the WebSocket: one task sends (the timeline, under a pacing), one task
receives (every adapter message is timestamped on arrival with the Core's monotonic clock,
checked against the protocol state machine and recorded). Any failure, from a refused
connection to a malformed message, ends the session as `failed` with a stage and a reason;
it never propagates out of `run()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from streameval.adapters.protocol import (
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    WS_PATH,
    AdapterError,
    FrameAck,
    FrameHeader,
    Hello,
    Instruction,
    ProtocolError,
    ProtocolViolation,
    Question,
    ResponseDelta,
    ResponseFinal,
    ResponseStart,
    RunConditions,
    SessionClosed,
    SessionEnd,
    SessionStart,
    Silent,
    Step,
    Workload,
    encode_frame,
    parse_adapter_message,
)
from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.config import Profile
from streameval.core.frames import VideoFrames
from streameval.core.store.events import (
    ADAPTER,
    INFRASTRUCTURE,
    Event,
    EventKind,
    probe_task_id,
)
from streameval.core.timeline import Timeline, TimelineItem

CLOSE_GRACE_S = 5.0

log = logging.getLogger("streameval.core")


class SessionFailure(Exception):
    """Why a session failed: the stage it reached, one line of reason, and the cause.

    `cause` tells failures a rerun may cure from those it will not: `infrastructure` (the
    adapter could not be reached, disconnected or crashed, sent no hello, or did not answer
    within the response timeout), `adapter` (it broke the protocol, reported a fatal error,
    speaks another protocol version or declared conditions the profile refuses) or `input`
    (the record's video or timeline is unusable).
    """

    def __init__(self, stage: str, reason: str, cause: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason
        self.cause = cause


@dataclass(frozen=True)
class SessionOutcome:
    session_id: str
    status: str  # finished | failed
    stage: str | None = None
    reason: str | None = None
    cause: str | None = None  # infrastructure | adapter | input, for a failed session
    adapter: dict[str, Any] | None = None  # the adapter's hello, once it arrived


@dataclass(frozen=True)
class SessionPlan:
    run_id: str
    session_id: str
    record: QARecord | ProactiveRecord
    timeline: Timeline
    frames: VideoFrames


class _Recorder:
    """Numbers a session's events and hands them to the run's single writer."""

    def __init__(self, run_id: str, session_id: str, sink: Callable[[Event], None]) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.sink = sink
        self.seq = 0

    def record(
        self, kind: EventKind, runtime_ns: int, video_t: float | None, /, **payload: Any
    ) -> None:
        # Positional-only, so that a payload may itself have a field named `kind`.
        self.sink(Event(self.run_id, self.session_id, self.seq, kind, runtime_ns, video_t, payload))
        self.seq += 1


class SessionDriver:
    def __init__(
        self,
        plan: SessionPlan,
        *,
        endpoint_url: str,
        conditions: RunConditions,
        profile: Profile,
        response_timeout_s: float,
        connect_timeout_s: float,
        sink: Callable[[Event], None],
    ) -> None:
        self.plan = plan
        self.endpoint_url = endpoint_url
        self.conditions = conditions
        self.profile = profile
        self.response_timeout_s = response_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.recorder = _Recorder(plan.run_id, plan.session_id, sink)
        self.task_id = plan.record.record_id
        self.ws: ClientConnection | None = None
        # Timeline position, for mapping arrivals to video time.
        self.current_t: float | None = None
        self.stream_origin: tuple[int, float] | None = None  # (runtime_ns, video t) wall clock
        # Protocol state.
        self.sent_frames: set[int] = set()
        self.known_tasks: set[str] = set()  # task ids the adapter may answer
        self.open_response: str | None = None
        self.next_delta_seq = 0
        self.seen_responses: set[str] = set()
        self.ending = False
        self.waiter: asyncio.Future | None = None
        self.waiting_for: tuple[str, int | None] | None = None
        self.failure: SessionFailure | None = None
        self.initiation = "polled"
        self.hello: dict[str, Any] | None = None  # the adapter_hello payload

    # ------------------------------------------------------------------ public

    async def run(self) -> SessionOutcome:
        try:
            await self._run()
        except SessionFailure as failure:
            return self._fail(failure)
        except (ConnectionClosed, OSError) as exc:
            return self._fail(self.failure or _closed_failure(exc))
        finally:
            if self.ws is not None:
                with contextlib.suppress(Exception):
                    await self.ws.close()
        self.recorder.record(EventKind.SESSION_FINISHED, time.monotonic_ns(), self.current_t)
        return SessionOutcome(self.plan.session_id, "finished", adapter=self.hello)

    # ------------------------------------------------------------------ phases

    async def _run(self) -> None:
        self.ws = await self._connect()
        await self._handshake()
        receiver = asyncio.create_task(self._receive_loop())
        try:
            if self.conditions.pacing == "logical":
                await self._play_logical()
            else:
                await self._play_wall_clock()
            await self._close()
        finally:
            receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await receiver
        if self.failure is not None:
            raise self.failure

    async def _connect(self) -> ClientConnection:
        try:
            return await connect(
                self.endpoint_url,
                compression=None,  # permessage-deflate stalls frame traffic (DESIGN.md)
                max_size=MAX_MESSAGE_BYTES,
                open_timeout=self.connect_timeout_s,
                ping_interval=HEARTBEAT_INTERVAL_S,
                ping_timeout=HEARTBEAT_TIMEOUT_S,
                close_timeout=2,
            )
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            reason = f"cannot connect to {self.endpoint_url}: {exc or type(exc).__name__}"
            if not urlsplit(self.endpoint_url).path.endswith(WS_PATH):
                reason += f" (adapters serve sessions at {WS_PATH}: ws://HOST:PORT{WS_PATH})"
            raise SessionFailure("connect", reason, INFRASTRUCTURE) from None

    async def _handshake(self) -> None:
        assert self.ws is not None
        try:
            raw = await asyncio.wait_for(self.ws.recv(), self.connect_timeout_s)
        except TimeoutError:
            raise SessionFailure("handshake", "adapter sent no hello", INFRASTRUCTURE) from None
        except ConnectionClosed as exc:
            raise SessionFailure("handshake", _closed_reason(exc), INFRASTRUCTURE) from None
        arrived = time.monotonic_ns()
        try:
            hello = parse_adapter_message(raw)
        except ProtocolViolation as violation:
            await self._violate(violation)
        if not isinstance(hello, Hello):
            await self._violate(ProtocolViolation("out_of_order", f"{hello.type} before hello"))
        self.hello = {
            "adapter": hello.adapter,
            "adapter_version": hello.adapter_version,
            "protocol": hello.protocol,
            "conditions": hello.conditions.model_dump(),
        }
        self.recorder.record(EventKind.ADAPTER_HELLO, arrived, None, **self.hello)
        if hello.protocol != PROTOCOL_VERSION:
            version = f"adapter speaks {hello.protocol}, core speaks {PROTOCOL_VERSION}"
            await self._violate(ProtocolViolation("version", version))
        self.initiation = hello.conditions.initiation
        conflict = self.profile.conflicts(
            hello.conditions, isinstance(self.plan.record, ProactiveRecord)
        )
        if conflict:
            raise SessionFailure("handshake", f"declared conditions: {conflict}", ADAPTER)
        start = SessionStart(
            run_id=self.plan.run_id,
            session_id=self.plan.session_id,
            record_ids=[self.plan.record.record_id],
            conditions=self.conditions,
        )
        await self.ws.send(start.model_dump_json())
        self.recorder.record(
            EventKind.SESSION_START,
            time.monotonic_ns(),
            None,
            endpoint=self.endpoint_url,
            conditions=self.conditions.model_dump(),
            record_ids=[self.plan.record.record_id],
        )

    async def _play_logical(self) -> None:
        for item in self.plan.timeline.items:
            if item.kind == "frame":
                waiter = self._expect("ack", item.frame.index)
                await self._send_frame(item, scheduled_ns=None, lag_ns=None)
                await self._await(waiter, f"frame {item.frame.index} acknowledgement")
            elif item.kind == "step":
                waiter = self._expect("decision", item.step)
                await self._send_step(item)
                await self._await(waiter, f"decision at step {item.step}")
            elif item.kind == "question":
                waiter = self._expect("decision", None)
                await self._send_task(item)
                await self._await(waiter, "answer")
            else:
                await self._send_task(item)

    async def _play_wall_clock(self) -> None:
        items = self.plan.timeline.items
        speed = self.conditions.speed
        origin_ns = time.monotonic_ns()
        origin_t = items[0].t
        self.stream_origin = (origin_ns, origin_t)
        answer: asyncio.Future | None = None

        def scheduled_ns(t: float) -> int:
            return origin_ns + int((t - origin_t) / speed * 1e9)

        for position, item in enumerate(items):
            scheduled = scheduled_ns(item.t)
            delay = scheduled - time.monotonic_ns()
            if delay > 0:
                await asyncio.sleep(delay / 1e9)
            self._raise_failure()
            lag = time.monotonic_ns() - scheduled
            if item.kind == "frame":
                following = _next_frame_t(items, position)
                if following is not None and scheduled_ns(following) <= time.monotonic_ns():
                    # The next frame is already due: skip this one, never stall the clock.
                    self.recorder.record(
                        EventKind.FRAME_DROPPED,
                        time.monotonic_ns(),
                        item.t,
                        index=item.frame.index,
                        frame_id=item.frame.frame_id,
                        t=item.t,
                        scheduled_ns=scheduled,
                        lag_ns=lag,
                    )
                    continue
                await self._send_frame(item, scheduled_ns=scheduled, lag_ns=lag)
            elif item.kind == "step":
                # Autonomous adapters speak on their own under wall clock; only polled ones
                # are asked to decide.
                if self.initiation != "autonomous":
                    await self._send_step(item)
            else:
                if item.kind == "question":
                    answer = self._expect("decision", None)
                await self._send_task(item)
        if answer is not None:
            await self._await(answer, "answer")
        elif self.open_response is not None:
            # Let a response that began inside the stream finish; its onset is already known.
            waiter = self._expect("decision", None)
            if self.open_response is not None:
                await self._await(waiter, "final of the open response")

    async def _close(self) -> None:
        assert self.ws is not None
        self.ending = True
        waiter = self._expect("closed", None)
        await self.ws.send(SessionEnd().model_dump_json())
        self.recorder.record(
            EventKind.SESSION_END, time.monotonic_ns(), self.current_t, reason="complete"
        )
        with contextlib.suppress(TimeoutError, SessionFailure):
            await asyncio.wait_for(asyncio.shield(waiter), CLOSE_GRACE_S)
        self._raise_failure()

    # ------------------------------------------------------------------ sending

    async def _send_frame(
        self, item: TimelineItem, scheduled_ns: int | None, lag_ns: int | None
    ) -> None:
        assert self.ws is not None and item.frame is not None
        ref = item.frame
        payload = self.plan.frames.read(ref)
        header = FrameHeader(
            index=ref.index,
            frame_id=ref.frame_id,
            t=ref.t,
            width=ref.width,
            height=ref.height,
            nbytes=len(payload),
        )
        self.sent_frames.add(ref.index)
        self.current_t = ref.t
        await self.ws.send(encode_frame(header, payload))
        self.recorder.record(
            EventKind.FRAME_SENT,
            time.monotonic_ns(),
            ref.t,
            index=ref.index,
            frame_id=ref.frame_id,
            t=ref.t,
            scheduled_ns=scheduled_ns,
            lag_ns=lag_ns,
            bytes=len(payload),
            width=ref.width,
            height=ref.height,
        )

    async def _send_step(self, item: TimelineItem) -> None:
        assert self.ws is not None
        # Under the frame-level protocol a step may come before the question itself.
        self.known_tasks.add(self.task_id)
        await self.ws.send(Step(task_id=self.task_id, step=item.step, t=item.t).model_dump_json())
        self.recorder.record(
            EventKind.STEP_SENT,
            time.monotonic_ns(),
            self.current_t,
            task_id=self.task_id,
            step=item.step,
            t=item.t,
        )

    async def _send_task(self, item: TimelineItem) -> None:
        assert self.ws is not None
        record = self.plan.record
        if item.probe is not None:
            assert isinstance(record, ProactiveRecord)
            probe = record.probes[item.probe]
            task_id = probe_task_id(record.record_id, item.probe)
            await self._send_question(task_id, item.t, probe.question, list(probe.options))
        elif isinstance(record, QARecord):
            await self._send_question(self.task_id, item.t, record.question, list(record.options))
        else:
            self.known_tasks.add(self.task_id)
            message = Instruction(task_id=self.task_id, t=item.t, text=record.instruction)
            await self.ws.send(message.model_dump_json())
            self.recorder.record(
                EventKind.INSTRUCTION_SENT,
                time.monotonic_ns(),
                self.current_t,
                task_id=self.task_id,
                record_id=record.record_id,
                t=item.t,
                text=record.instruction,
            )

    async def _send_question(self, task_id: str, t: float, text: str, options: list[str]):
        assert self.ws is not None
        self.known_tasks.add(task_id)
        message = Question(task_id=task_id, t=t, text=text, options=options)
        await self.ws.send(message.model_dump_json())
        self.recorder.record(
            EventKind.QUESTION_SENT,
            time.monotonic_ns(),
            self.current_t,
            task_id=task_id,
            record_id=self.plan.record.record_id,
            t=t,
            text=text,
            options=options,
        )

    # ------------------------------------------------------------------ waiting

    def _expect(self, what: str, key: int | None) -> asyncio.Future:
        self._raise_failure()
        self.waiter = asyncio.get_running_loop().create_future()
        self.waiting_for = (what, key)
        return self.waiter

    def _resolve(self, what: str, key: int | None = None) -> None:
        if self.waiter is None or self.waiter.done() or self.waiting_for is None:
            return
        want, want_key = self.waiting_for
        if want == what and (want_key is None or key is None or want_key == key):
            self.waiter.set_result(None)

    async def _await(self, waiter: asyncio.Future, what: str) -> None:
        try:
            await asyncio.wait_for(waiter, self.response_timeout_s)
        except TimeoutError:
            reason = f"no {what} within {self.response_timeout_s:g}s"
            raise SessionFailure("response", reason, INFRASTRUCTURE) from None
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    # ------------------------------------------------------------------ receiving

    def _video_time_now(self, now_ns: int) -> float | None:
        if self.stream_origin is None:
            return self.current_t
        origin_ns, origin_t = self.stream_origin
        return origin_t + (now_ns - origin_ns) / 1e9 * self.conditions.speed

    async def _receive_loop(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                arrived = time.monotonic_ns()
                self._accept(parse_adapter_message(raw), arrived)
        except SessionFailure as failure:
            self._set_failure(failure)
        except ProtocolViolation as violation:
            await self._report_violation(violation)
        except ConnectionClosed as exc:
            if not self.ending:
                self._set_failure(_closed_failure(exc))
        except Exception as exc:  # a bug here must fail the session, never hang it
            log.exception("session %s: error handling an adapter message", self.plan.session_id)
            failure = SessionFailure("streaming", f"core error: {exc!r}", INFRASTRUCTURE)
            self._set_failure(failure)
        else:
            if not self.ending:
                closed = SessionFailure(
                    "streaming", "adapter closed the connection", INFRASTRUCTURE
                )
                self._set_failure(closed)
        if self.ending and self.failure is None:
            self._resolve("closed")

    def _accept(self, message, arrived: int) -> None:
        """Check one adapter message against the protocol state, record it, wake waiters."""
        video_t = self._video_time_now(arrived)
        record = self.recorder.record
        if isinstance(message, FrameAck):
            if message.index not in self.sent_frames:
                raise ProtocolViolation("out_of_order", f"ack for unsent frame {message.index}")
            record(EventKind.FRAME_ACK, arrived, video_t, index=message.index)
            self._resolve("ack", message.index)
        elif isinstance(message, ResponseStart):
            self._check_task(message.task_id, "response_start")
            if self.open_response is not None:
                raise ProtocolViolation(
                    "out_of_order", f"response_start while {self.open_response} is still open"
                )
            if message.response_id in self.seen_responses:
                raise ProtocolViolation("out_of_order", f"reused response id {message.response_id}")
            self.open_response = message.response_id
            self.seen_responses.add(message.response_id)
            self.next_delta_seq = 0
            record(
                EventKind.RESPONSE_START,
                arrived,
                video_t,
                response_id=message.response_id,
                task_id=message.task_id,
            )
        elif isinstance(message, ResponseDelta):
            self._check_open(message.response_id, "response_delta")
            if message.seq != self.next_delta_seq:
                raise ProtocolViolation(
                    "out_of_order", f"delta seq {message.seq}, expected {self.next_delta_seq}"
                )
            self.next_delta_seq += 1
            record(
                EventKind.RESPONSE_DELTA,
                arrived,
                video_t,
                response_id=message.response_id,
                seq=message.seq,
                text=message.text,
                snapshot=message.snapshot,
            )
        elif isinstance(message, ResponseFinal):
            self._check_open(message.response_id, "response_final")
            self.open_response = None
            record(
                EventKind.RESPONSE_FINAL,
                arrived,
                video_t,
                response_id=message.response_id,
                text=message.text,
                output_tokens=message.output_tokens,
                input_tokens=message.input_tokens,
            )
            self._resolve("decision")
        elif isinstance(message, Silent):
            self._check_task(message.task_id, "silent")
            if self.open_response is not None:
                raise ProtocolViolation("out_of_order", "silent while a response is open")
            record(EventKind.SILENT, arrived, video_t, task_id=message.task_id, step=message.step)
            self._resolve("decision", message.step)
        elif isinstance(message, Workload):
            record(EventKind.WORKLOAD, arrived, video_t, **message.model_dump(exclude={"type"}))
        elif isinstance(message, AdapterError):
            record(
                EventKind.ADAPTER_ERROR,
                arrived,
                video_t,
                code=message.code,
                message=message.message,
                fatal=message.fatal,
            )
            if message.fatal:
                reason = f"adapter error {message.code}: {message.message}"
                raise SessionFailure("adapter", reason, ADAPTER)
        elif isinstance(message, SessionClosed):
            if not self.ending:
                raise ProtocolViolation("out_of_order", "session_closed before session_end")
            self._resolve("closed")
        elif isinstance(message, ProtocolError):
            # The adapter says the Core broke the protocol: a rerun would do the same again.
            raise SessionFailure(
                "streaming",
                f"adapter reported protocol error {message.code}: {message.message}",
                ADAPTER,
            )
        else:  # a second hello
            raise ProtocolViolation("out_of_order", f"unexpected {message.type} after hello")

    def _check_task(self, task_id: str, what: str) -> None:
        if not self.known_tasks:
            raise ProtocolViolation(
                "out_of_order", f"{what} before any question, instruction or step"
            )
        if task_id not in self.known_tasks:
            raise ProtocolViolation("out_of_order", f"{what} for unknown task {task_id!r}")

    def _check_open(self, response_id: str, what: str) -> None:
        if self.open_response != response_id:
            raise ProtocolViolation("out_of_order", f"{what} for unopened response {response_id!r}")

    # ------------------------------------------------------------------ failure

    async def _violate(self, violation: ProtocolViolation) -> None:
        await self._report_violation(violation)
        self._raise_failure()

    async def _report_violation(self, violation: ProtocolViolation) -> None:
        reason = f"{violation.code}: {violation.message}"
        self._set_failure(SessionFailure("protocol", reason, ADAPTER))
        if self.ws is not None:
            with contextlib.suppress(Exception):
                error = ProtocolError(code=violation.code, message=violation.message)
                await self.ws.send(error.model_dump_json())
                await self.ws.close(1002, violation.code)

    def _set_failure(self, failure: SessionFailure) -> None:
        if self.failure is None:
            self.failure = failure
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(failure)

    def _fail(self, failure: SessionFailure) -> SessionOutcome:
        self.recorder.record(
            EventKind.SESSION_FAILED,
            time.monotonic_ns(),
            self.current_t,
            stage=failure.stage,
            reason=failure.reason,
            cause=failure.cause,
        )
        return SessionOutcome(
            self.plan.session_id,
            "failed",
            failure.stage,
            failure.reason,
            failure.cause,
            self.hello,
        )


def _next_frame_t(items: tuple[TimelineItem, ...], position: int) -> float | None:
    return next((item.t for item in items[position + 1 :] if item.kind == "frame"), None)


def _closed_failure(exc: BaseException) -> SessionFailure:
    """A lost connection: infrastructure, unless the adapter's message was oversized (a
    protocol violation, which a rerun would repeat)."""
    oversized = isinstance(exc, ConnectionClosed) and exc.sent is not None and exc.sent.code == 1009
    return SessionFailure(
        "streaming", _closed_reason(exc), ADAPTER if oversized else INFRASTRUCTURE
    )


def _closed_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed):
        sent = exc.sent
        if sent is not None and sent.code == 1009:
            return f"adapter sent an oversized message (limit {MAX_MESSAGE_BYTES} bytes)"
        received = exc.rcvd
        if received is None:
            return "adapter disconnected without a close frame"
        return f"adapter closed the connection (code {received.code} {received.reason})".strip()
    return f"{type(exc).__name__}: {exc}"

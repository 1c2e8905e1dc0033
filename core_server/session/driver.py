"""Drive one session against one adapter endpoint and record everything that happens.

The driver is I/O glue. It connects (connection.py), reads the hello, then plays the
timeline under a pacing (pacing.py) through the send path (sender.py), while the receive
side, called by the connection for each adapter message as it is parsed, timestamps it on
arrival with the Core's monotonic clock and feeds it to the protocol state machine
(protocol_state.py), which says what to record, what it resolves and whether it broke the
protocol. Any failure, from a refused connection to a malformed
message, ends the session as `failed` with a stage, a reason and a cause (failures.py); it
never propagates out of `run()`. A `cut` item of the timeline drops the connection as a
network failure would, reconnects and starts the session again, resumed where the adapter
can (docs/protocol.md, "Reconnect and resume").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from streameval.core.benchmark.records import ProactiveRecord
from streameval.core.config import ProtocolProfile, audio_refusal
from streameval.core.frames.types import FrameRef
from streameval.core.session.connection import (
    AdapterConnection,
    closed_failure,
    connect_adapter,
)
from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.pacing import VideoClock, pacing_for
from streameval.core.session.protocol_state import (
    AdapterMessage,
    Awaited,
    ProtocolState,
    Resolution,
    ResponseLimits,
    hello_payload,
)
from streameval.core.session.recorder import Recorder, streaming_failure
from streameval.core.session.sender import SessionStream
from streameval.core.session.waiting import Waits
from streameval.core.store.store import EventRow, StoreError
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import TimelineItem
from streameval.delivery import Arrival
from streameval.events import EventKind, FailureCause
from streameval.protocol import (
    MAX_HELLO_BYTES,
    Hello,
    ProtocolError,
    ProtocolViolation,
    ResumePoint,
    RunConditions,
    SessionEnd,
    SessionStart,
    frame_ack_index,
    parse_adapter_message,
)

CLOSE_GRACE_S = 5.0

log = logging.getLogger("streameval.core")


@dataclass(frozen=True)
class SessionOutcome:
    session_id: str
    status: Literal["finished", "failed"]
    stage: str | None = None
    reason: str | None = None
    cause: str | None = None  # infrastructure | adapter | input, for a failed session
    adapter: dict[str, Any] | None = None  # the adapter's hello, once it arrived
    # Whether a task (question, instruction or step) was sent before the session ended.
    task_sent: bool = True
    # The video it streamed and the seconds it waited, before connecting, for its frames to
    # be decoded (0.0: they were in the frame cache); set by the run (run/runner.py).
    video: str | None = None
    decode_wait_s: float = 0.0

    @property
    def before_first_task(self) -> bool:
        """An infrastructure failure before any task reached the adapter (refused or lost
        connection, no hello, the adapter gone while only frames were sent): the replica is
        unusable and the session may run elsewhere as a new attempt (endpoint_health.py).
        A failure after a task was sent follows TRACE's rule: it stays a failure."""
        return (
            self.status == "failed"
            and self.cause == FailureCause.INFRASTRUCTURE
            and not self.task_sent
        )


class SessionDriver:
    """One session: connect, handshake, play the timeline, end; record every step."""

    def __init__(
        self,
        plan: SessionPlan,
        *,
        endpoint_url: str,
        conditions: RunConditions,
        profile: ProtocolProfile,
        response_timeout_s: float,
        connect_timeout_s: float,
        sink: Callable[[EventRow], None],
        ready_timeout_s: float = 0.0,
        response_limits: ResponseLimits | None = None,
        check_hello: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        self.plan = plan
        # What is wrong with a hello for this endpoint (another adapter than its /info
        # named), None when nothing is.
        self.check_hello = check_hello
        self.endpoint_url = endpoint_url
        self.conditions = conditions
        self.profile = profile
        self.connect_timeout_s = connect_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.recorder = Recorder(plan.run_id, plan.session_id, sink)
        self.protocol = ProtocolState(response_limits)
        self.waits = Waits(response_timeout_s)
        self.clock = VideoClock(conditions.speed)
        self.ws: AdapterConnection | None = None
        self.receiver: _Receiver | None = None  # the current connection's receive side

    @property
    def hello(self) -> dict[str, Any] | None:
        """The adapter_hello payload, once a hello arrived."""
        return None if self.protocol.hello is None else hello_payload(self.protocol.hello)

    async def run(self) -> SessionOutcome:
        try:
            await self._run()
        except SessionFailure as failure:
            return self._fail(failure)
        except (ConnectionClosed, OSError) as exc:
            return self._fail(self.waits.failure or closed_failure(exc))
        finally:
            self.waits.close()
            if self.ws is not None:
                with contextlib.suppress(Exception):
                    await self.ws.close()
        self.recorder.record(EventKind.SESSION_FINISHED, time.monotonic_ns(), self.clock.current_t)
        return SessionOutcome(self.plan.session_id, "finished", adapter=self.hello)

    async def _run(self) -> None:
        self.ws = ws = await connect_adapter(
            self.endpoint_url, self.connect_timeout_s, self.ready_timeout_s
        )
        self.receiver = receiver = self._receiver(ws)
        try:
            hello = await self._handshake(ws, receiver)
            stream = SessionStream(
                ws,
                self.plan,
                self.recorder,
                self.protocol,
                self.waits,
                self.clock,
                reconnect=self._reconnect,
                audio=self.conditions.audio,
            )
            pacing = pacing_for(
                self.conditions.pacing,
                speed=self.conditions.speed,
                initiation=hello.conditions.initiation,
                clock=self.clock,
            )
            receiver.start()
            await pacing.play(self.plan.timeline.items, stream)
            await self._close(self.ws)
        finally:
            await self.receiver.stop()
        self.waits.check()

    def _receiver(self, ws: AdapterConnection) -> _Receiver:
        return _Receiver(
            ws, self.plan.session_id, self.recorder, self.protocol, self.waits, self.clock
        )

    async def _handshake(self, ws: AdapterConnection, receiver: _Receiver) -> Hello:
        """Read the hello, check the declared conditions against the profile, send
        session_start."""
        hello = await self._greeting(receiver)
        proactive = isinstance(self.plan.record, ProactiveRecord)
        conflict = self.profile.conflicts(hello.conditions, proactive)
        if conflict is None and self.conditions.audio is not None and not hello.audio:
            conflict = audio_refusal(hello.adapter)
        if conflict:
            reason = f"declared conditions: {conflict}"
            raise SessionFailure(FailureStage.HANDSHAKE, reason, FailureCause.ADAPTER)
        start = self._session_start()
        await ws.send(start.model_dump_json())
        self.recorder.record(
            EventKind.SESSION_START,
            time.monotonic_ns(),
            None,
            endpoint=self.endpoint_url,
            # Every field, `audio` too while unset (the wire leaves it out then).
            conditions={"audio": None, **self.conditions.model_dump()},
            record_ids=start.record_ids,
        )
        return hello

    def _session_start(self, resume: ResumePoint | None = None) -> SessionStart:
        return SessionStart(
            run_id=self.plan.run_id,
            session_id=self.plan.session_id,
            record_ids=[self.plan.record.record_id],
            conditions=self.conditions,
            resume=resume,
        )

    async def _greeting(self, receiver: _Receiver) -> Hello:
        """The connection's hello (the state machine refuses anything else)."""
        try:
            raw, arrived = await asyncio.wait_for(receiver.hello, self.connect_timeout_s)
        except TimeoutError:
            stage = FailureStage.HANDSHAKE
            raise SessionFailure(
                stage, "adapter sent no hello", FailureCause.INFRASTRUCTURE
            ) from None
        except ConnectionClosed as exc:
            raise closed_failure(exc, FailureStage.HANDSHAKE) from None
        try:
            _within_hello_limit(raw)
            receiver.accept(parse(raw), arrived)
        except ProtocolViolation as violation:
            await receiver.violate(violation)
        hello = self.protocol.hello
        assert hello is not None  # accepted as the first message: it is the hello
        problem = None if self.check_hello is None else self.check_hello(hello_payload(hello))
        if problem is not None:
            reason = f"identity: {problem}"
            raise SessionFailure(FailureStage.HANDSHAKE, reason, FailureCause.ADAPTER)
        return hello

    async def _reconnect(
        self, item: TimelineItem, last_frame: FrameRef | None
    ) -> AdapterConnection:
        """A `cut` item: drop the connection as a network failure would, reconnect and
        start the session again, asking the adapter to resume it when its hello says it
        can. An answer in flight is lost with the old connection (recorded as cut); under
        wall-clock pacing the clock runs on meanwhile. An infrastructure failure on the way
        back (refused, no hello) fails the session at stage `streaming`, naming the cut."""
        assert self.ws is not None and self.receiver is not None
        await self.ws.cut()
        await self.receiver.stop()
        cut_ns = time.monotonic_ns()
        open_response = self.protocol.reconnected()
        self.recorder.record(
            EventKind.CONNECTION_CUT,
            cut_ns,
            self.clock.current_t,
            t=item.t,
            last_frame_index=None if last_frame is None else last_frame.index,
            open_response=open_response,
        )
        try:
            self.ws = ws = await connect_adapter(
                self.endpoint_url, self.connect_timeout_s, self.ready_timeout_s
            )
            self.receiver = receiver = self._receiver(ws)
            hello = await self._greeting(receiver)
        except SessionFailure as failure:
            if failure.cause != FailureCause.INFRASTRUCTURE:
                raise
            reason = f"connection cut at {item.t:g}s: reconnect failed: {failure.reason}"
            raise SessionFailure(FailureStage.STREAMING, reason, failure.cause) from None
        resume, answer = None, None
        if hello.resume:
            resume = ResumePoint(
                last_frame_index=None if last_frame is None else last_frame.index,
                last_t=None if last_frame is None else last_frame.t,
            )
            self.protocol.resume_sent()
            answer = self.waits.expect(Awaited.RESUMED)
        await ws.send(self._session_start(resume).model_dump_json())
        receiver.start()
        if answer is not None:
            await self.waits.wait(answer, "session_resumed after the connection cut")
        now = time.monotonic_ns()
        self.recorder.record(
            EventKind.SESSION_RESUMED,
            now,
            self.clock.current_t,
            supported=hello.resume,
            resumed=bool(self.protocol.resumed),
            reconnect_ns=now - cut_ns,
        )
        return ws

    async def _close(self, ws: AdapterConnection) -> None:
        """session_end, then a short grace for session_closed: an adapter that does not
        answer it still finishes (its answers are all recorded), one that fails does not."""
        self.protocol.end()
        waiter = self.waits.expect(Awaited.CLOSED)
        await ws.send(SessionEnd().model_dump_json())
        now = time.monotonic_ns()
        self.recorder.record(EventKind.SESSION_END, now, self.clock.current_t, reason="complete")
        with contextlib.suppress(TimeoutError, SessionFailure):
            await asyncio.wait_for(asyncio.shield(waiter), CLOSE_GRACE_S)
        self.waits.check()

    def _fail(self, failure: SessionFailure) -> SessionOutcome:
        # Recorded as plain strings: the stored values are the contract, not the enum.
        stage = FailureStage(failure.stage).value
        self.recorder.record(
            EventKind.SESSION_FAILED,
            time.monotonic_ns(),
            self.clock.current_t,
            stage=stage,
            reason=failure.reason,
            cause=failure.cause,
        )
        return SessionOutcome(
            self.plan.session_id,
            "failed",
            stage,
            failure.reason,
            failure.cause,
            self.hello,
            task_sent=self.recorder.task_recorded,
        )


class _Receiver:
    """The receive side: every adapter message, timestamped on arrival, through the state
    machine; what it says is recorded, resolves the send side's wait, or fails the session.

    It runs inside the connection's `data_received` (AdapterConnection), one call per
    message. The first message is handed to the handshake (`hello`); the ones after it wait
    until `start()`, once session_start is sent, as they would in the socket's queue."""

    def __init__(
        self,
        ws: AdapterConnection,
        session_id: str,
        recorder: Recorder,
        protocol: ProtocolState,
        waits: Waits,
        clock: VideoClock,
    ) -> None:
        self.ws = ws
        self.session_id = session_id
        self.recorder = recorder
        self.protocol = protocol
        self.waits = waits
        self.clock = clock
        self.hello: asyncio.Future[tuple[Arrival, int]] = asyncio.get_running_loop().create_future()
        self._held: list[tuple[Arrival | ConnectionClosed, int]] | None = []
        self._stopped = False
        self._reporting: asyncio.Task[SessionFailure] | None = None
        ws.deliver_to(self._arrived, self._closed)

    def start(self) -> None:
        """Handle what arrived since the hello, then every message as it arrives."""
        held, self._held = self._held or [], None
        for item, arrived in held:
            if isinstance(item, ConnectionClosed):
                self._ended(item)
            elif not self._stopped:
                self._handle(item, arrived)

    async def stop(self) -> None:
        """Ignore whatever still arrives; let a violation's report reach the adapter."""
        self._stopped = True
        if self._reporting is not None:
            with contextlib.suppress(Exception):
                await self._reporting

    def _arrived(self, raw: Arrival, arrived: int) -> None:
        if not self.hello.done():
            self.hello.set_result((raw, arrived))
        elif self._held is not None:
            self._held.append((raw, arrived))
        elif not self._stopped:
            self._handle(raw, arrived)

    def _closed(self, exc: ConnectionClosed) -> None:
        if not self.hello.done():
            self.hello.set_exception(exc)
        elif self._held is not None:
            self._held.append((exc, 0))
        else:
            self._ended(exc)

    def _handle(self, raw: Arrival, arrived: int) -> None:
        try:
            index = frame_ack_index(raw)
            if index is None:
                self.accept(parse(raw), arrived)
            else:
                self._acked(index, arrived)
        except SessionFailure as failure:
            self._stop_with(failure)
        except ProtocolViolation as violation:
            self._stopped = True
            self._reporting = asyncio.ensure_future(self.report(violation))
        except StoreError as exc:
            # The store failed: the worker stops the run; this session just stops waiting.
            self._stop_with(streaming_failure(exc))
        except Exception as exc:  # a bug here must fail the session, never hang it
            log.exception("session %s: error handling an adapter message", self.session_id)
            self._stop_with(streaming_failure(exc))

    def _stop_with(self, failure: SessionFailure) -> None:
        self._stopped = True
        self.waits.fail(failure)

    def _ended(self, exc: ConnectionClosed) -> None:
        """The connection is gone: a failure unless the session was ending; the end of an
        ending session answers the wait for session_closed."""
        if not self.protocol.ending:
            if isinstance(exc, ConnectionClosedOK):
                reason = "adapter closed the connection"
                failure = SessionFailure(
                    FailureStage.STREAMING, reason, FailureCause.INFRASTRUCTURE
                )
            else:
                failure = closed_failure(exc)
            self.waits.fail(failure)
        if self.protocol.ending and self.waits.failure is None:
            self.waits.resolve(Resolution(Awaited.CLOSED))

    def accept(self, message: AdapterMessage, arrived: int) -> None:
        """Record what the state machine says, then raise its violation or failure, or
        resolve the wait it answers."""
        reaction = self.protocol.accept(message, arrived, self.clock.at(arrived))
        if (record := reaction.record) is not None:
            self.recorder.record(record.kind, record.runtime_ns, record.video_t, **record.payload)
        if reaction.violation is not None:
            raise reaction.violation
        if reaction.failure is not None:
            raise reaction.failure
        if reaction.resolves is not None:
            self.waits.resolve(reaction.resolves)

    def _acked(self, index: int, arrived: int) -> None:
        """`accept` for a frame_ack, on the state machine's own path for it."""
        violation = self.protocol.accept_ack(index)
        if violation is not None:
            raise violation
        self.recorder.frame_ack(arrived, self.clock.at(arrived), index)
        self.waits.resolve(Resolution(Awaited.ACK, index))

    async def violate(self, violation: ProtocolViolation) -> NoReturn:
        """Report the violation, then raise the session's (first) failure."""
        failure = await self.report(violation)
        raise self.waits.failure or failure

    async def report(self, violation: ProtocolViolation) -> SessionFailure:
        """Fail the session at stage `protocol`, tell the adapter why and close (1002)."""
        reason = f"{violation.code}: {violation.message}"
        failure = SessionFailure(FailureStage.PROTOCOL, reason, FailureCause.ADAPTER)
        self.waits.fail(failure)
        with contextlib.suppress(Exception):
            error = ProtocolError(code=violation.code, message=violation.message)
            await self.ws.send(error.model_dump_json())
            await self.ws.close(1002, violation.code)
        return failure


def _within_hello_limit(raw: Arrival) -> None:
    """Refuse a first message over MAX_HELLO_BYTES before it is parsed or recorded."""
    if isinstance(raw, UnicodeDecodeError):
        size = len(raw.object)
    else:
        size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_HELLO_BYTES:
        reason = f"hello is {size} bytes, over the limit of {MAX_HELLO_BYTES} bytes"
        raise ProtocolViolation("oversized", reason + " (settings included)")


def parse(raw: Arrival) -> AdapterMessage:
    """An adapter message, or the ProtocolViolation that it is not one."""
    if isinstance(raw, UnicodeDecodeError):
        reason = f"text message is not UTF-8: {raw.reason} at position {raw.start}"
        raise ProtocolViolation("malformed", reason)
    return parse_adapter_message(raw)

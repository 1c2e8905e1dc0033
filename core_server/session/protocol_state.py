"""The Core's side of the `streameval/1` state machine, without a socket.

`ProtocolState` is told what the Core sent (frames, tasks, steps, the end of the session)
and judges each parsed adapter message against that: `accept` returns a `Reaction` saying
what to record, which wait it resolves (a frame's ack, a decision, the close), and whether
the message broke the protocol (a violation: code + message) or ended the session (a fatal
adapter error, a `protocol_error` from the adapter). It never does I/O and never waits, so
every rule of docs/protocol.md ("Rules the Core enforces") can be tested message by message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from streameval.core.config import MAX_RESPONSE_BYTES, MAX_RESPONSE_DELTAS, MAX_SESSION_EVENTS
from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.events import EventKind, FailureCause
from streameval.protocol import (
    PROTOCOL_VERSION,
    AdapterError,
    AdapterMessage,
    AudioAck,
    FrameAck,
    Hello,
    ProtocolError,
    ProtocolViolation,
    ResponseDelta,
    ResponseFinal,
    ResponseStart,
    SessionClosed,
    SessionResumed,
    Silent,
    Workload,
    count_problem,
)


@dataclass(frozen=True, slots=True)
class ResponseLimits:
    """What one response may stream: its deltas, and the UTF-8 bytes of their text
    (snapshots included: each is stored in full). Exceeding either fails the session with
    protocol error `response_too_large`, before the delta is recorded. `max_events` caps
    the adapter messages recorded for the whole session: the one past it fails the session
    with `too_many_events`, unrecorded."""

    max_deltas: int = MAX_RESPONSE_DELTAS
    max_bytes: int = MAX_RESPONSE_BYTES
    max_events: int = MAX_SESSION_EVENTS


class Awaited(StrEnum):
    """What the Core's send side can wait for."""

    ACK = "ack"  # a frame's frame_ack (keyed by frame index)
    AUDIO_ACK = "audio_ack"  # an audio chunk's audio_ack (keyed by chunk index)
    DECISION = "decision"  # a response_final, or a silent (keyed by step)
    CLOSED = "closed"  # session_closed, or the socket closing after session_end
    RESUMED = "resumed"  # session_resumed, the answer to a resuming session_start


class Resolution(NamedTuple):
    """One thing waited for or delivered; `key` None matches any key (see `satisfies`).
    A tuple, not a frozen dataclass: two are made per frame, and a frozen dataclass takes
    half as long again to make (340 ns against 220 ns here)."""

    awaited: Awaited
    key: int | None = None

    def satisfies(self, expected: Resolution) -> bool:
        # A final carries no step, and a wait for "an answer" names none: either side
        # leaving the key open is a match, so a response may close a step's decision.
        if self.awaited != expected.awaited:
            return False
        return expected.key is None or self.key is None or expected.key == self.key


@dataclass(frozen=True, slots=True)
class Record:
    """An event to record: `Recorder.record(kind, runtime_ns, video_t, **payload)`."""

    kind: EventKind
    runtime_ns: int
    video_t: float | None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reaction:
    """What one adapter message does. Record first; then a violation or a failure ends the
    session, otherwise `resolves` wakes the send side."""

    record: Record | None = None
    resolves: Resolution | None = None
    violation: ProtocolViolation | None = None
    failure: SessionFailure | None = None


def hello_payload(hello: Hello) -> dict[str, Any]:
    """The `adapter_hello` payload, which is also the session outcome's `adapter`."""
    return {
        "adapter": hello.adapter,
        "adapter_version": hello.adapter_version,
        "protocol": hello.protocol,
        "conditions": hello.conditions.model_dump(),
        "gpu": hello.gpu,
        "audio": hello.audio,
    }


def _out_of_order(message: str) -> ProtocolViolation:
    return ProtocolViolation("out_of_order", message)


@dataclass(frozen=True, slots=True)
class _Arrival:
    """When a message arrived: every event it causes is stamped with this."""

    ns: int
    video_t: float | None

    def record(self, kind: EventKind, /, **payload: Any) -> Record:
        # Positional-only, so that a payload may itself have a field named `kind` (workload).
        return Record(kind, self.ns, self.video_t, payload)


class ProtocolState:
    """What the Core sent, what the adapter said, and what the adapter may say next."""

    def __init__(self, limits: ResponseLimits | None = None) -> None:
        self.limits = limits or ResponseLimits()
        self.hello: Hello | None = None  # the latest connection's hello
        self.greeted = False  # the current connection's hello arrived
        self.resume_asked = False  # a resuming session_start went out, unanswered
        self.resumed: bool | None = None  # the adapter's answer to it
        self.sent_frames: set[int] = set()
        self.sent_audio: set[int] = set()
        self.known_tasks: set[str] = set()  # task ids the adapter may answer
        self.open_response: str | None = None
        self.next_delta_seq = 0
        self.response_bytes = 0  # delta text bytes of the open response
        self.seen_responses: set[str] = set()
        self.ending = False
        self.recorded = 0  # adapter messages recorded for this session

    # ------------------------------------------------------------------ Core side

    def frame_sent(self, index: int) -> None:
        self.sent_frames.add(index)

    def audio_sent(self, index: int) -> None:
        self.sent_audio.add(index)

    def task_sent(self, task_id: str) -> None:
        """A question or an instruction went out: the adapter may answer it."""
        self.known_tasks.add(task_id)

    def step_sent(self, task_id: str) -> None:
        # Under the frame-level protocol a step may come before the question itself.
        self.known_tasks.add(task_id)

    def reconnected(self) -> str | None:
        """The connection was cut and a new one opened: the adapter greets again, and the
        response that was open on the old one is cut (returned: its id, or None). Frames,
        tasks and response ids stay known: a resumed adapter may go on answering them."""
        cut, self.open_response = self.open_response, None
        self.greeted = False
        self.resumed = None
        return cut

    def resume_sent(self) -> None:
        """A resuming session_start went out: the adapter answers session_resumed."""
        self.resume_asked = True

    def end(self) -> None:
        """session_end is going out: from now on session_closed and a close are expected."""
        self.ending = True

    @property
    def response_open(self) -> bool:
        return self.open_response is not None

    # ------------------------------------------------------------------ adapter side

    def accept(self, message: AdapterMessage, arrived_ns: int, video_t: float | None) -> Reaction:
        """Judge one parsed adapter message that arrived at `arrived_ns` (video time
        `video_t`). A refused message changes nothing, except that a hello of another
        protocol version is still kept: the session's outcome names the adapter it met."""
        if isinstance(message, FrameAck):
            violation = self.accept_ack(message.index)
            if violation is not None:
                return Reaction(violation=violation)
            ack = _Arrival(arrived_ns, video_t).record(EventKind.FRAME_ACK, index=message.index)
            return Reaction(ack, Resolution(Awaited.ACK, message.index))
        try:
            if not self.greeted and not isinstance(message, Hello):
                raise _out_of_order(f"{message.type} before hello")
            reaction = self._dispatch(message, _Arrival(arrived_ns, video_t))
        except ProtocolViolation as violation:
            return Reaction(violation=violation)
        if reaction.record is None:
            return reaction
        if self.recorded >= self.limits.max_events:
            # Checked after the message was judged (only recorded messages count); the
            # session fails on it, so the state it changed is never used again.
            return Reaction(violation=self._too_many_events())
        self.recorded += 1
        return reaction

    def accept_ack(self, index: int) -> ProtocolViolation | None:
        """`accept` for a frame_ack, the message of every frame, without building a
        Reaction: the violation it is, or None once it counts as recorded (the caller
        records it and resolves the ack's wait)."""
        if not self.greeted:
            return _out_of_order("frame_ack before hello")
        if index not in self.sent_frames:
            return _out_of_order(f"ack for unsent frame {index}")
        if self.recorded >= self.limits.max_events:
            return self._too_many_events()
        self.recorded += 1
        return None

    def _too_many_events(self) -> ProtocolViolation:
        return ProtocolViolation(
            "too_many_events",
            f"the adapter sent more than {self.limits.max_events} recorded messages in "
            "this session (max_session_events)",
        )

    def _dispatch(self, message: AdapterMessage, arrival: _Arrival) -> Reaction:
        record = arrival.record
        match message:
            case Hello():
                return self._hello(message, arrival)
            case AudioAck():
                if message.index not in self.sent_audio:
                    raise _out_of_order(f"audio_ack for unsent chunk {message.index}")
                ack = record(EventKind.AUDIO_ACK, index=message.index)
                return Reaction(ack, Resolution(Awaited.AUDIO_ACK, message.index))
            case ResponseStart():
                return Reaction(self._start(message, arrival))
            case ResponseDelta():
                return Reaction(self._delta(message, arrival))
            case ResponseFinal():
                self._check_open(message.response_id, "response_final")
                self._check_counts(message)
                self.open_response = None
                final = record(
                    EventKind.RESPONSE_FINAL,
                    response_id=message.response_id,
                    text=message.text,
                    output_tokens=message.output_tokens,
                    input_tokens=message.input_tokens,
                )
                return Reaction(final, Resolution(Awaited.DECISION))
            case Silent():
                self._check_task(message.task_id, "silent")
                if self.open_response is not None:
                    raise _out_of_order("silent while a response is open")
                silent = record(EventKind.SILENT, task_id=message.task_id, step=message.step)
                return Reaction(silent, Resolution(Awaited.DECISION, message.step))
            case Workload():
                self._check_counts(message)
                # Every field, those an adapter's JSON leaves out while unset too.
                fields = {name: getattr(message, name) for name in Workload.model_fields}
                del fields["type"]
                return Reaction(record(EventKind.WORKLOAD, **fields))
            case AdapterError():
                return self._error(message, arrival)
            case SessionResumed():
                if not self.resume_asked:
                    raise _out_of_order("session_resumed without a resuming session_start")
                self.resume_asked = False
                self.resumed = message.resumed
                return Reaction(resolves=Resolution(Awaited.RESUMED))
            case SessionClosed():
                if not self.ending:
                    raise _out_of_order("session_closed before session_end")
                return Reaction(resolves=Resolution(Awaited.CLOSED))
            case ProtocolError():
                # The adapter says the Core broke the protocol: a rerun would do the same.
                reason = f"adapter reported protocol error {message.code}: {message.message}"
                return Reaction(
                    failure=SessionFailure(FailureStage.STREAMING, reason, FailureCause.ADAPTER)
                )
        raise TypeError(f"not an adapter message: {message!r}")

    def _hello(self, message: Hello, arrival: _Arrival) -> Reaction:
        if self.greeted:
            raise _out_of_order(f"unexpected {message.type} after hello")
        # A reconnected adapter's hello is not recorded again: the session met it already.
        first = self.hello is None
        # Kept even when the version is refused: the outcome names the adapter that was met.
        self.hello = message
        self.greeted = True
        greeted = None
        if first:
            greeted = arrival.record(EventKind.ADAPTER_HELLO, **hello_payload(message))
        if message.protocol == PROTOCOL_VERSION:
            return Reaction(greeted)
        version = f"adapter speaks {message.protocol}, core speaks {PROTOCOL_VERSION}"
        return Reaction(greeted, violation=ProtocolViolation("version", version))

    def _start(self, message: ResponseStart, arrival: _Arrival) -> Record:
        self._check_task(message.task_id, "response_start")
        if self.open_response is not None:
            raise _out_of_order(f"response_start while {self.open_response} is still open")
        if message.response_id in self.seen_responses:
            raise _out_of_order(f"reused response id {message.response_id}")
        self.open_response = message.response_id
        self.seen_responses.add(message.response_id)
        self.next_delta_seq = 0
        self.response_bytes = 0
        return arrival.record(
            EventKind.RESPONSE_START, response_id=message.response_id, task_id=message.task_id
        )

    def _delta(self, message: ResponseDelta, arrival: _Arrival) -> Record:
        self._check_open(message.response_id, "response_delta")
        if message.seq != self.next_delta_seq:
            raise _out_of_order(f"delta seq {message.seq}, expected {self.next_delta_seq}")
        if message.seq >= self.limits.max_deltas:
            raise ProtocolViolation(
                "response_too_large",
                f"response {message.response_id} sent more than {self.limits.max_deltas} "
                "deltas (max_response_deltas)",
            )
        size = self.response_bytes + len(message.text.encode("utf-8", "surrogatepass"))
        if size > self.limits.max_bytes:
            raise ProtocolViolation(
                "response_too_large",
                f"response {message.response_id} streamed more than {self.limits.max_bytes} "
                "bytes of text (max_response_bytes)",
            )
        self.response_bytes = size
        self.next_delta_seq += 1
        return arrival.record(
            EventKind.RESPONSE_DELTA,
            response_id=message.response_id,
            seq=message.seq,
            text=message.text,
            snapshot=message.snapshot,
        )

    def _error(self, message: AdapterError, arrival: _Arrival) -> Reaction:
        reported = arrival.record(
            EventKind.ADAPTER_ERROR, code=message.code, message=message.message, fatal=message.fatal
        )
        if not message.fatal:
            return Reaction(reported)
        reason = f"adapter error {message.code}: {message.message}"
        return Reaction(
            reported, failure=SessionFailure(FailureStage.ADAPTER, reason, FailureCause.ADAPTER)
        )

    def _check_counts(self, message: ResponseFinal | Workload) -> None:
        # An impossible count is a broken adapter: refused like any malformed message,
        # so it is never averaged into the workload metrics.
        problem = count_problem(message)
        if problem is not None:
            raise ProtocolViolation("malformed", problem)

    def _check_task(self, task_id: str, what: str) -> None:
        if not self.known_tasks:
            raise _out_of_order(f"{what} before any question, instruction or step")
        if task_id not in self.known_tasks:
            raise _out_of_order(f"{what} for unknown task {task_id!r}")

    def _check_open(self, response_id: str, what: str) -> None:
        if self.open_response != response_id:
            raise _out_of_order(f"{what} for unopened response {response_id!r}")

"""Numbering a session's events, in the order the Core observed them, as the rows that store
them."""

from __future__ import annotations

import math
from collections.abc import Callable
from json.encoder import encode_basestring
from typing import Any

from streameval.core.session.failures import SessionFailure
from streameval.core.store.store import EventRow, StoreError, event_row
from streameval.events import Event, EventKind, FailureCause, FailureStage


class Recorder:
    """Numbers a session's events and hands their rows to the run's single writer.

    `record` validates the payload as an `Event` does. The two events of every frame,
    `frame_sent` and `frame_ack`, have their own methods that store JSON text made directly
    from values the Core made itself (typed, and checked where they came from): building
    and serialising a validated event for them was a tenth of the Core's time per frame.
    tests/test_send_path.py checks that their text reads back as the same payload.
    """

    def __init__(self, run_id: str, session_id: str, sink: Callable[[EventRow], None]) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.sink = sink
        self.seq = 0
        # Whether a task (question, instruction or step) was recorded as sent: from then on
        # the session's outcome is the model's (SessionOutcome.before_first_task).
        self.task_recorded = False

    def record(
        self, kind: EventKind, runtime_ns: int, video_t: float | None, /, **payload: Any
    ) -> None:
        # Positional-only, so that a payload may itself have a field named `kind`.
        event = Event(self.run_id, self.session_id, self.seq, kind, runtime_ns, video_t, payload)
        self.sink(event_row(event))
        self.seq += 1
        if kind in TASK_EVENTS:
            self.task_recorded = True

    def frame_sent(self, runtime_ns: int, video_t: float, payload: str) -> None:
        """A frame_sent whose payload is `frame_sent_payload`'s text: made for this send,
        or made once for a shared frame message delivered as sampled (FrameMessage)."""
        self._put(_FRAME_SENT, runtime_ns, video_t, payload)

    def frame_ack(self, runtime_ns: int, video_t: float | None, index: int) -> None:
        self._put(_FRAME_ACK, runtime_ns, video_t, f'{{"index":{int(index)}}}')

    def _put(self, kind: str, runtime_ns: int, video_t: float | None, payload: str) -> None:
        self.sink((self.run_id, self.session_id, self.seq, kind, runtime_ns, video_t, payload))
        self.seq += 1


def streaming_failure(exc: Exception) -> SessionFailure:
    """What fails a session when handling its stream raised: the store failed for good while
    recording (a StoreError: the worker stops the run, in one line) or the Core's own code
    did (a bug, which the caller logs). Infrastructure either way, at stage streaming."""
    reason = str(exc) if isinstance(exc, StoreError) else f"core error: {exc!r}"
    return SessionFailure(FailureStage.STREAMING, reason, FailureCause.INFRASTRUCTURE)


# The kinds' values, read once: an enum member's `.value` is a descriptor call.
_FRAME_SENT = EventKind.FRAME_SENT.value
_FRAME_ACK = EventKind.FRAME_ACK.value


# The events of a task reaching the adapter (the frame events have methods of their own).
TASK_EVENTS = frozenset({EventKind.QUESTION_SENT, EventKind.INSTRUCTION_SENT, EventKind.STEP_SENT})


def frame_sent_payload(
    *,
    index: int,
    frame_id: str,
    t: float,
    source_t: float | None,
    scheduled_ns: int | None,
    lag_ns: int | None,
    nbytes: int,
    width: int,
    height: int,
) -> str:
    """frame_sent's payload as JSON text, from the Core's own typed values (what
    `record` would store after validating them: tests/test_send_path.py checks it)."""
    if not (math.isfinite(t) and (source_t is None or math.isfinite(source_t))):
        raise ValueError(f"frame {index} has no finite time stamp (t={t}, source_t={source_t})")
    return (
        f'{{"index":{int(index)},"frame_id":{encode_basestring(frame_id)},'
        f'"t":{float(t)!r},"source_t":{_number(source_t)},'
        f'"scheduled_ns":{_integer(scheduled_ns)},"lag_ns":{_integer(lag_ns)},'
        f'"bytes":{int(nbytes)},"width":{int(width)},"height":{int(height)}}}'
    )


def _number(value: float | None) -> str:
    return "null" if value is None else repr(float(value))


def _integer(value: int | None) -> str:
    return "null" if value is None else str(int(value))

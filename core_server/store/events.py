"""Recorded events: the contract between the Core (writer) and the scorer (reader).

Every event is keyed (run_id, session_id, seq); `seq` counts from 0 within a session in the
order the Core observed things. `runtime_ns` is the Core's monotonic clock (time.monotonic_ns)
at send or arrival; `video_t` is the video time the Core's timeline had reached at that
moment (the last frame sent), so onsets can be mapped under both pacings. Payload fields per
kind are documented in docs/events.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EventKind(StrEnum):
    # Core side: what the Core sent, when.
    SESSION_START = "session_start"  # conditions sent to the adapter, adapter endpoint
    ADAPTER_HELLO = "adapter_hello"  # the adapter's declared conditions
    FRAME_SENT = "frame_sent"  # index, frame_id, t, scheduled_ns, lag_ns, bytes, width, height
    FRAME_DROPPED = "frame_dropped"  # wall clock only: a frame the Core skipped while lagging
    QUESTION_SENT = "question_sent"  # task_id, record_id, t, text, options
    INSTRUCTION_SENT = "instruction_sent"  # task_id, record_id, t, text
    STEP_SENT = "step_sent"  # task_id, step, t
    SESSION_END = "session_end"  # reason
    # Adapter side: what arrived, timestamped on arrival.
    FRAME_ACK = "frame_ack"
    RESPONSE_START = "response_start"  # response_id, task_id
    RESPONSE_DELTA = "response_delta"  # response_id, seq, text, snapshot
    RESPONSE_FINAL = "response_final"  # response_id, text, output_tokens, input_tokens
    SILENT = "silent"  # task_id, step
    WORKLOAD = "workload"  # kind, frame_ids, images, pixels, tokens, call interval
    ADAPTER_ERROR = "adapter_error"  # code, message, fatal
    # Outcome.
    SESSION_FAILED = "session_failed"  # stage, reason, cause
    SESSION_FINISHED = "session_finished"


@dataclass(slots=True)
class Event:
    run_id: str
    session_id: str
    seq: int
    kind: str
    runtime_ns: int
    video_t: float | None
    payload: dict[str, Any] = field(default_factory=dict)


# Why a session failed, as told by `cause` in a `session_failed` payload.
INFRASTRUCTURE = "infrastructure"  # the adapter could not be reached, vanished or timed out
ADAPTER = "adapter"  # the adapter broke the protocol, reported a fatal error, was refused
INPUT = "input"  # the Core could not use the record's video or timeline
FAILURE_CAUSES = (INFRASTRUCTURE, ADAPTER, INPUT)

_CAUSE_OF_STAGE = {
    "connect": INFRASTRUCTURE,
    "streaming": INFRASTRUCTURE,
    "response": INFRASTRUCTURE,
    "frames": INPUT,
}


def failure_cause(payload: dict[str, Any]) -> str:
    """The cause of a `session_failed` payload: `infrastructure`, `adapter` or `input`.

    Payloads written before the Core recorded `cause` have only `stage` and `reason`; the
    cause is then derived from them: a lost or unreachable adapter and a response timeout
    (`connect`, `streaming`, `response`) are infrastructure, an unusable video or timeline
    (`frames`) is input, a handshake failure is infrastructure unless the adapter's declared
    conditions were refused, and everything else (`protocol`, `adapter`) is the adapter's.
    """
    cause = payload.get("cause")
    if cause is not None:
        return str(cause)
    stage = payload.get("stage")
    if stage == "handshake":
        reason = payload.get("reason") or ""
        return ADAPTER if reason.startswith("declared conditions") else INFRASTRUCTURE
    return _CAUSE_OF_STAGE.get(str(stage), ADAPTER)


def probe_task_id(record_id: str, index: int) -> str:
    """The task id under which the Core asks probe `index` of a record (`record.probes`)."""
    return f"{record_id}#probe{index}"

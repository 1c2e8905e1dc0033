"""The recorded events: every kind, the payload each kind carries, and the event record.

This module is the contract between the Core, which records events, and the scorer, which
reads them; it belongs to neither. Every event kind has one frozen pydantic model for its
payload (`PAYLOAD_MODELS`), and an `Event` validates its payload against its kind's model
when it is created: a missing, renamed, extra or mistyped field fails where the event is
written (or read back from a store or an export), never later as a metric that silently
scored None.

Validation is strict, because the payload is a record of what happened, not user input to
be coerced: every field is required (a value that was not observed is `None`, which the
field's type must allow), unknown fields are refused, JSON types are exact (`"1"` is not an
int, `true` is not an int, an int is accepted where a float is expected) and NaN/Infinity are
refused (the store and the export hold JSON, which has neither).

Readers validate each payload once: `read_payload` (a stored dict or its JSON text) also
brings payloads of older Cores up to date. `python -m streameval.events --markdown` prints
the payload tables of docs/events.md, `--json-schema` the JSON Schema of an event line
(docs/events.schema.json), and `--write DOCS_DIR` rewrites both.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import models_json_schema
from typing_extensions import TypeAliasType

# --------------------------------------------------------------------------- kinds


class EventKind(StrEnum):
    """Every kind of recorded event (the `kind` column); each has one payload model."""

    # Core side: what the Core sent, when.
    SESSION_START = "session_start"
    FRAME_SENT = "frame_sent"
    FRAME_DROPPED = "frame_dropped"
    AUDIO_SENT = "audio_sent"
    QUESTION_SENT = "question_sent"
    INSTRUCTION_SENT = "instruction_sent"
    STEP_SENT = "step_sent"
    SESSION_END = "session_end"
    CONNECTION_CUT = "connection_cut"
    SESSION_RESUMED = "session_resumed"
    # Adapter side: what arrived, timestamped on arrival.
    ADAPTER_HELLO = "adapter_hello"
    FRAME_ACK = "frame_ack"
    AUDIO_ACK = "audio_ack"
    RESPONSE_START = "response_start"
    RESPONSE_DELTA = "response_delta"
    RESPONSE_FINAL = "response_final"
    SILENT = "silent"
    WORKLOAD = "workload"
    ADAPTER_ERROR = "adapter_error"
    # Outcome.
    SESSION_FAILED = "session_failed"
    SESSION_FINISHED = "session_finished"


# --------------------------------------------------------------------------- closed sets


class FailureCause(StrEnum):
    """Why a session failed, as told by `cause` in a `session_failed` payload."""

    INFRASTRUCTURE = "infrastructure"  # the adapter could not be reached, vanished, timed out
    ADAPTER = "adapter"  # the adapter broke the protocol, reported a fatal error, was refused
    INPUT = "input"  # the Core could not use the record's video or timeline


class FailureStage(StrEnum):
    """Where in a session it failed (docs/protocol.md), as told by `stage` in a
    `session_failed` payload and the sessions table's `failure_stage`."""

    CONNECT = "connect"  # the endpoint refused or did not answer
    HANDSHAKE = "handshake"  # no hello, or declared conditions the profile refuses
    FRAMES = "frames"  # the record's video or timeline is unusable
    PROTOCOL = "protocol"  # the adapter broke the protocol
    STREAMING = "streaming"  # the connection was lost, or the Core itself broke
    RESPONSE = "response"  # no ack, answer or decision within the response timeout
    ADAPTER = "adapter"  # the adapter reported a fatal error


# Named aliases (not bare Literals) so that the docs and the JSON Schema can name each set.
Pacing = TypeAliasType("Pacing", Literal["logical", "wall_clock"])
WorkloadKind = TypeAliasType(
    "WorkloadKind", Literal["model_call", "state_commit", "drop", "replay", "evict"]
)
# The conditions an adapter declares in its hello (streameval/protocol.py AdapterConditions).
AdapterState = TypeAliasType("AdapterState", Literal["native", "non-native"])
Initiation = TypeAliasType("Initiation", Literal["autonomous", "polled", "query"])
Boundary = TypeAliasType("Boundary", Literal["model+adapter", "full-system"])
Deployment = TypeAliasType(
    "Deployment", Literal["in-process", "local-service", "remote-api", "none"]
)
# How a session's sound was delivered (streameval/protocol.py AudioConditions).
AudioChannels = TypeAliasType("AudioChannels", Literal[1])
AudioEncoding = TypeAliasType("AudioEncoding", Literal["pcm_s16le"])

_CAUSE_OF_STAGE = {
    "connect": FailureCause.INFRASTRUCTURE,
    "streaming": FailureCause.INFRASTRUCTURE,
    "response": FailureCause.INFRASTRUCTURE,
    "frames": FailureCause.INPUT,
}


def failure_cause(payload: SessionFailedPayload | Mapping[str, Any]) -> FailureCause:
    """The cause of a `session_failed` payload: `infrastructure`, `adapter` or `input`.

    Payloads written before the Core recorded `cause` have only `stage` and `reason`; the
    cause is then derived from them: a lost or unreachable adapter and a response timeout
    (`connect`, `streaming`, `response`) are infrastructure, an unusable video or timeline
    (`frames`) is input, a handshake failure is infrastructure unless the adapter's declared
    conditions were refused, and everything else (`protocol`, `adapter`) is the adapter's.
    A mapping is accepted too: the runner derives the cause of a stored session's columns.
    """
    if isinstance(payload, SessionFailedPayload):
        return payload.cause
    cause = payload.get("cause")
    if cause is not None:
        return FailureCause(cause)
    stage = payload.get("stage")
    if stage == "handshake":
        reason = payload.get("reason")
        if isinstance(reason, str) and reason.startswith("declared conditions"):
            return FailureCause.ADAPTER
        return FailureCause.INFRASTRUCTURE
    return _CAUSE_OF_STAGE.get(str(stage), FailureCause.ADAPTER)


def probe_task_id(record_id: str, index: int) -> str:
    """The task id under which the Core asks probe `index` of a record (`record.probes`)."""
    return f"{record_id}#probe{index}"


# --------------------------------------------------------------------------- payloads


class EventPayload(BaseModel):
    """The base of every payload model: strict, frozen, every field required."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class AudioSessionConditions(EventPayload):
    """How the session's sound was delivered (streameval/protocol.py AudioConditions)."""

    sample_rate: int
    channels: AudioChannels
    encoding: AudioEncoding
    chunk_s: float


class SessionConditions(EventPayload):
    """The conditions the Core announced (streameval/protocol.py RunConditions); `audio` is
    `null` when the session streamed no sound."""

    profile: str
    pacing: Pacing
    speed: float
    fps: float
    max_width: int
    jpeg_quality: int
    qa_history_s: float
    proactive_lead_s: float
    audio: AudioSessionConditions | None


class DeclaredConditions(EventPayload):
    """The conditions an adapter declared (streameval/protocol.py AdapterConditions)."""

    state: AdapterState
    initiation: Initiation
    boundary: Boundary
    deployment: Deployment
    model_name: str
    model_version: str
    history: str
    settings: dict[str, str | int | float | bool]


class SessionStartPayload(EventPayload):
    """the session's announced conditions"""

    endpoint: str
    conditions: SessionConditions
    record_ids: list[str]


class FrameSentPayload(EventPayload):
    """`t` is the time stamp the frame was delivered with (its header's `t`); `source_t` is
    its sample's own time where a perturbation moved it (`null` otherwise); `video_t` =
    the sample's time; `scheduled_ns` is `null` under logical pacing; `lag_ns` = send time
    − scheduled time (`null` when there is no schedule)"""

    index: int
    frame_id: str
    t: float
    source_t: float | None
    scheduled_ns: int | None
    lag_ns: int | None
    bytes: int
    width: int
    height: int


class FrameDroppedPayload(EventPayload):
    """wall-clock pacing only: the Core skipped a frame because it was late; the clock never
    stalls"""

    index: int
    frame_id: str
    t: float
    scheduled_ns: int | None
    lag_ns: int | None


class AudioSentPayload(EventPayload):
    """an audio chunk: `samples` PCM samples at `sample_rate` covering video time
    [`start_t`, `t`); `video_t` = `t`, the time the stream had reached when it went out;
    `silent`: the video has no sound and the chunk is zeros standing in for it;
    `scheduled_ns` / `lag_ns` as for frames (`null` under logical pacing)"""

    index: int
    start_t: float
    t: float
    sample_rate: int
    samples: int
    bytes: int
    silent: bool
    scheduled_ns: int | None
    lag_ns: int | None


class QuestionSentPayload(EventPayload):
    """its `runtime_ns` is the QA runtime origin (question arrival); a task id other than the
    record id is one of the record's probes (`{record_id}#probe{k}`)"""

    task_id: str
    record_id: str
    t: float
    text: str
    options: list[str]


class InstructionSentPayload(EventPayload):
    """a proactive task's instruction"""

    task_id: str
    record_id: str
    t: float
    text: str


class StepSentPayload(EventPayload):
    """a decision step of a task: the adapter answers or stays silent (`silent`)"""

    task_id: str
    step: int
    t: float


class SessionEndPayload(EventPayload):
    """the Core closed the session"""

    reason: str


class ConnectionCutPayload(EventPayload):
    """the Core dropped the connection at a `cut` of the timeline (video time `t`), as a
    network failure would: no `session_end`, no close handshake; `last_frame_index`: the
    last frame sent before it (`null`: none); `open_response`: the response in flight, cut
    (its final never comes), `null` when none was open"""

    t: float
    last_frame_index: int | None
    open_response: str | None


class SessionResumedPayload(EventPayload):
    """the Core reconnected after a `connection_cut` and started the session again;
    `supported`: the adapter's hello declared `resume`; `resumed`: it kept the session's
    state (false: the session goes on with a fresh adapter state, the model lost its
    context); `reconnect_ns`: from the cut to this event"""

    supported: bool
    resumed: bool
    reconnect_ns: int


class AdapterHelloPayload(EventPayload):
    """the adapter's declared conditions (also the session's `adapter` column); `audio`:
    it declared that it consumes audio chunks"""

    adapter: str
    adapter_version: str
    protocol: str
    conditions: DeclaredConditions
    gpu: str | None  # the accelerator the adapter named; None when it named none
    audio: bool


class FrameAckPayload(EventPayload):
    """the adapter took the frame"""

    index: int


class AudioAckPayload(EventPayload):
    """the adapter took the audio chunk"""

    index: int


class ResponseStartPayload(EventPayload):
    """`runtime_ns` = first token received by the Core; `video_t` = the mapped onset: under
    logical pacing the video time of the step during which it began, under wall-clock pacing
    `video_start + (runtime − stream_start) × speed`"""

    response_id: str
    task_id: str


class ResponseDeltaPayload(EventPayload):
    """`seq` counts the deltas of one response from 0; `snapshot` true means `text` replaces
    the text so far, false that it is appended"""

    response_id: str
    seq: int
    text: str
    snapshot: bool


class ResponseFinalPayload(EventPayload):
    """token counts are `null` when not reported"""

    response_id: str
    text: str
    output_tokens: int | None
    input_tokens: int | None


class SilentPayload(EventPayload):
    """an explicit decision to stay silent at that step (`null`: declining a question)"""

    task_id: str
    step: int | None


class WorkloadPayload(EventPayload):
    """what the adapter did (streameval/protocol.py Workload); counts it did not report are
    `null`"""

    kind: WorkloadKind
    frame_ids: list[str]
    images: int | None
    pixels: int | None
    replayed_frames: int | None
    prefix_shared_images: int | None
    audio_seconds: float | None
    audio_tokens: int | None
    input_tokens: int | None
    output_tokens: int | None
    started_ns: int | None
    ended_ns: int | None


class AdapterErrorPayload(EventPayload):
    """an error the adapter reported"""

    code: str
    message: str
    fatal: bool


class SessionFailedPayload(EventPayload):
    """`stage`: see docs/protocol.md; `cause`: see Failure causes, below"""

    # Not strict: the Core passes stage and cause as plain strings, which become the enums.
    stage: FailureStage = Field(strict=False)
    reason: str
    cause: FailureCause = Field(strict=False)


class SessionFinishedPayload(EventPayload):
    """the session completed normally"""


PAYLOAD_MODELS: Mapping[EventKind, type[EventPayload]] = types.MappingProxyType(
    {
        EventKind.SESSION_START: SessionStartPayload,
        EventKind.FRAME_SENT: FrameSentPayload,
        EventKind.FRAME_DROPPED: FrameDroppedPayload,
        EventKind.AUDIO_SENT: AudioSentPayload,
        EventKind.QUESTION_SENT: QuestionSentPayload,
        EventKind.INSTRUCTION_SENT: InstructionSentPayload,
        EventKind.STEP_SENT: StepSentPayload,
        EventKind.SESSION_END: SessionEndPayload,
        EventKind.CONNECTION_CUT: ConnectionCutPayload,
        EventKind.SESSION_RESUMED: SessionResumedPayload,
        EventKind.ADAPTER_HELLO: AdapterHelloPayload,
        EventKind.FRAME_ACK: FrameAckPayload,
        EventKind.AUDIO_ACK: AudioAckPayload,
        EventKind.RESPONSE_START: ResponseStartPayload,
        EventKind.RESPONSE_DELTA: ResponseDeltaPayload,
        EventKind.RESPONSE_FINAL: ResponseFinalPayload,
        EventKind.SILENT: SilentPayload,
        EventKind.WORKLOAD: WorkloadPayload,
        EventKind.ADAPTER_ERROR: AdapterErrorPayload,
        EventKind.SESSION_FAILED: SessionFailedPayload,
        EventKind.SESSION_FINISHED: SessionFinishedPayload,
    }
)
# Keyed by the kind's plain string too: readers look kinds up as the store returns them.
_KINDS: dict[str, EventKind] = {kind.value: kind for kind in EventKind}
_MODEL_OF: dict[str, type[EventPayload]] = {kind.value: m for kind, m in PAYLOAD_MODELS.items()}
# The models' core validators, called directly: the cheapest way in (no per-call wrapper).
_VALIDATORS = {kind.value: model.__pydantic_validator__ for kind, model in PAYLOAD_MODELS.items()}


# Each kind's JSON validator (a payload's JSON text to its model), for readers of many rows:
# one call per row is the cheapest validation there is. A row that fails (ValidationError, or
# KeyError for an unknown kind) should be read again with `read_payload`, which upgrades a
# payload of an older Core or raises a PayloadError naming the field.
JSON_PAYLOAD_READERS: Mapping[str, Callable[[str | bytes], EventPayload]] = types.MappingProxyType(
    {kind: validator.validate_json for kind, validator in _VALIDATORS.items()}
)


class PayloadError(ValueError):
    """A payload that does not match its kind's model (or an unknown kind); the message is
    one line naming the kind and the first offending field (`field`, dotted when nested)."""

    def __init__(self, kind: str, field: str | None, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.field = field


def _payload_error(kind: str, exc: ValidationError) -> PayloadError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    field = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        message = f"{kind} payload lacks field {field!r}"
    elif first["type"] == "extra_forbidden":
        message = f"{kind} payload has unknown field {field!r}"
    elif not field:  # the payload itself is not an object
        message = f"{kind} payload: {first['msg']}, got {_short(first['input'])}"
    else:
        message = f"{kind} payload, field {field!r}: {first['msg']}, got {_short(first['input'])}"
    if len(errors) > 1:
        more = len(errors) - 1
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return PayloadError(kind, field or None, message)


def _short(value: Any, limit: int = 80) -> str:
    """A value's repr for a one-line message: a long text or list is cut."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def event_kind(kind: str) -> EventKind:
    """The kind named `kind`; PayloadError if there is no such kind."""
    try:
        return _KINDS[kind]
    except KeyError:
        raise PayloadError(str(kind), None, f"unknown event kind {str(kind)!r}") from None


def validate_payload(kind: str, payload: EventPayload | Mapping[str, Any]) -> EventPayload:
    """A payload as written: its kind's model, or a mapping validated into it."""
    model = _MODEL_OF[event_kind(kind)]
    if type(payload) is model:
        return payload
    if isinstance(payload, EventPayload):
        wrong = type(payload).__name__
        raise PayloadError(kind, None, f"a {kind} payload must be {model.__name__}, not {wrong}")
    try:
        return _VALIDATORS[kind].validate_python(payload)
    except ValidationError as exc:
        raise _payload_error(kind, exc) from None


def read_payload(kind: str, data: Mapping[str, Any] | str | bytes) -> EventPayload:
    """A payload as stored or exported (a dict or its JSON text), validated once.

    Payloads of older Cores are brought up to date: a `session_failed` without `cause` gets
    the cause `failure_cause` derives, an `adapter_hello` without `gpu` gets None and one
    whose conditions lack `settings` gets none declared.
    """
    validator = _VALIDATORS.get(kind) or _VALIDATORS[event_kind(kind)]
    try:
        if isinstance(data, str | bytes):
            return validator.validate_json(data)
        return validator.validate_python(data)
    except ValidationError as exc:
        upgraded = _upgraded(kind, data)
        if upgraded is None:
            raise _payload_error(kind, exc) from None
        return validate_payload(kind, upgraded)


# Fields later Cores added to a kind: where each sits in the payload (a path of keys) and
# what an older payload gets for it.
_ADDED_FIELDS: dict[str, tuple[tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]], ...]] = {
    EventKind.SESSION_FAILED: ((("cause",), lambda payload: failure_cause(payload).value),),
    EventKind.SESSION_START: ((("conditions", "audio"), lambda payload: None),),
    EventKind.ADAPTER_HELLO: (
        (("gpu",), lambda payload: None),
        (("conditions", "settings"), lambda payload: {}),
        (("audio",), lambda payload: False),
    ),
    EventKind.FRAME_SENT: ((("source_t",), lambda payload: None),),
    EventKind.WORKLOAD: (
        (("prefix_shared_images",), lambda payload: None),
        (("audio_seconds",), lambda payload: None),
        (("audio_tokens",), lambda payload: None),
    ),
}


def _upgraded(kind: str, data: Mapping[str, Any] | str | bytes) -> dict[str, Any] | None:
    """The payload as today's Core records it, or None when it is not an older form."""
    if kind not in _ADDED_FIELDS:
        return None
    try:
        payload = json.loads(data) if isinstance(data, str | bytes) else dict(data)
    except ValueError:
        return None
    if not isinstance(payload, dict):
        return None
    upgraded = payload
    for path, value_for in _ADDED_FIELDS[kind]:
        upgraded = _with_field(upgraded, path, value_for(payload))
    return None if upgraded is payload else upgraded


def _with_field(payload: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """`payload` with `value` at `path` when that field is missing (a copy; the same object
    when nothing was missing or the path does not lead through mappings)."""
    name, rest = path[0], path[1:]
    if not rest:
        return payload if name in payload else {**payload, name: value}
    inner = payload.get(name)
    if not isinstance(inner, dict):
        return payload
    filled = _with_field(inner, rest, value)
    return payload if filled is inner else {**payload, name: filled}


# --------------------------------------------------------------------------- the event


@dataclass(slots=True)
class Event:
    """One recorded event, keyed (run_id, session_id, seq).

    `seq` counts from 0 within a session in the order the Core observed things. `runtime_ns`
    is the Core's monotonic clock (time.monotonic_ns) at send or arrival; `video_t` is the
    video time the Core's timeline had reached at that moment (the last frame sent), so
    onsets can be mapped under both pacings. `kind` may be given as a string and `payload` as
    a mapping: both are validated when the event is created (PayloadError), and the event
    holds the EventKind and its typed payload (frozen). The event itself is not frozen: a
    frozen dataclass costs 3x as much to create, and readers create millions; treat it as
    a record all the same.
    """

    run_id: str
    session_id: str
    seq: int
    kind: EventKind
    runtime_ns: int
    video_t: float | None
    payload: EventPayload

    def __post_init__(self) -> None:
        kind = _KINDS.get(self.kind)
        # Readers pass the payload they validated (read_payload): only its type is checked.
        if kind is None or type(self.payload) is not _MODEL_OF[kind]:
            kind = event_kind(self.kind)
            self.payload = validate_payload(kind, self.payload)
        self.kind = kind


# --------------------------------------------------------------------------- documentation

# The sections of docs/events.md's payload tables, in order.
SECTIONS: tuple[tuple[str, tuple[EventKind, ...]], ...] = (
    (
        "Core side: what the Core sent",
        (
            EventKind.SESSION_START,
            EventKind.FRAME_SENT,
            EventKind.FRAME_DROPPED,
            EventKind.AUDIO_SENT,
            EventKind.QUESTION_SENT,
            EventKind.INSTRUCTION_SENT,
            EventKind.STEP_SENT,
            EventKind.SESSION_END,
            EventKind.CONNECTION_CUT,
            EventKind.SESSION_RESUMED,
        ),
    ),
    (
        "Adapter side: what arrived, timestamped on arrival",
        (
            EventKind.ADAPTER_HELLO,
            EventKind.FRAME_ACK,
            EventKind.AUDIO_ACK,
            EventKind.RESPONSE_START,
            EventKind.RESPONSE_DELTA,
            EventKind.RESPONSE_FINAL,
            EventKind.SILENT,
            EventKind.WORKLOAD,
            EventKind.ADAPTER_ERROR,
        ),
    ),
    ("Outcome", (EventKind.SESSION_FAILED, EventKind.SESSION_FINISHED)),
)
MARKDOWN_BEGIN = (
    "<!-- generated from streameval/events.py by `python -m streameval.events --write docs`; "
    "do not edit by hand -->"
)
MARKDOWN_END = "<!-- end of generated payload tables -->"
SCHEMA_FILE = "events.schema.json"
_SCALARS = {int: "int", float: "float", str: "str", bool: "bool", type(None): "null"}


def _closed_sets(annotation: Any) -> Iterator[TypeAliasType | type[Enum]]:
    """The named closed sets (aliases, enums) an annotation uses, nested models included."""
    if isinstance(annotation, TypeAliasType) or (
        isinstance(annotation, type) and issubclass(annotation, Enum)
    ):
        yield annotation
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        for field in annotation.model_fields.values():
            yield from _closed_sets(field.annotation)
    else:
        for arg in get_args(annotation):
            yield from _closed_sets(arg)


def _type_text(annotation: Any) -> str:
    """How the tables write a field's type: JSON-ish names, `or` for unions (a `|` would end
    the table cell), a nested model inline as `{field: type, ...}`."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, TypeAliasType):
        return annotation.__name__
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return annotation.__name__
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _fields_text(annotation)
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_text(arg) for arg in get_args(annotation))
    if origin is list:
        return f"list[{_type_text(get_args(annotation)[0])}]"
    if origin is dict:
        key, value = get_args(annotation)
        return f"map[{_type_text(key)}, {_type_text(value)}]"
    raise TypeError(f"no table text for the payload type {annotation!r}")


def _fields_text(model: type[BaseModel]) -> str:
    fields = (f"{name}: {_type_text(f.annotation)}" for name, f in model.model_fields.items())
    return "{" + ", ".join(fields) + "}"


def _set_values(closed: TypeAliasType | type[Enum]) -> list[str]:
    if isinstance(closed, TypeAliasType):
        return list(get_args(closed.__value__))
    return [member.value for member in closed]


def _notes(model: type[EventPayload]) -> str:
    return " ".join(inspect.cleandoc(model.__doc__ or "").split())


def markdown() -> str:
    """docs/events.md's payload tables (one per section) and the table of closed sets."""
    lines: list[str] = []
    closed: dict[str, TypeAliasType | type[Enum]] = {}
    for title, kinds in SECTIONS:
        lines += [f"### {title}", "", "| Kind | Payload | Notes |", "| --- | --- | --- |"]
        for kind in kinds:
            model = PAYLOAD_MODELS[kind]
            lines.append(f"| `{kind}` | `{_fields_text(model)}` | {_notes(model)} |")
            for field in model.model_fields.values():
                closed.update((c.__name__, c) for c in _closed_sets(field.annotation))
        lines.append("")
    lines += [
        "### Closed sets",
        "",
        "| Set | Values |",
        "| --- | --- |",
        *(
            f"| `{name}` | {', '.join(f'`{value}`' for value in _set_values(c))} |"
            for name, c in closed.items()
        ),
    ]
    return "\n".join(lines) + "\n"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of an event line of the export, its payload per kind."""
    models = list(PAYLOAD_MODELS.values())
    _, definitions = models_json_schema(
        [(model, "validation") for model in models], ref_template="#/$defs/{model}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "streameval event",
        "description": (
            "One recorded event as a JSONL export writes it (streameval-events/1, "
            "docs/events.md); its payload is the model of its kind. Generated from "
            "streameval/events.py: do not edit by hand."
        ),
        "type": "object",
        "properties": {
            "type": {"const": "event"},
            "session_id": {"type": "string"},
            "seq": {"type": "integer", "minimum": 0},
            "kind": {"enum": [kind.value for kind in EventKind]},
            "runtime_ns": {"type": "integer"},
            "video_t": {"type": ["number", "null"]},
            "payload": {"type": "object"},
        },
        "required": ["type", "session_id", "seq", "kind", "runtime_ns", "video_t", "payload"],
        "additionalProperties": False,
        "oneOf": [
            {
                "properties": {
                    "kind": {"const": kind.value},
                    "payload": {"$ref": f"#/$defs/{model.__name__}"},
                }
            }
            for kind, model in PAYLOAD_MODELS.items()
        ],
        "$defs": definitions["$defs"],
    }


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def with_markdown(document: str) -> str:
    """`document` (docs/events.md) with its generated block replaced by `markdown()`."""
    start = document.index(MARKDOWN_BEGIN) + len(MARKDOWN_BEGIN)
    end = document.index(MARKDOWN_END)
    return document[:start] + "\n\n" + markdown() + "\n" + document[end:]


def write_docs(docs: Path) -> None:
    """Regenerate docs/events.md's payload tables and docs/events.schema.json."""
    events_md = docs / "events.md"
    events_md.write_text(with_markdown(events_md.read_text(encoding="utf-8")), encoding="utf-8")
    (docs / SCHEMA_FILE).write_text(json_schema_text(), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The recorded events' payload schema.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the payload tables")
    what.add_argument("--json-schema", action="store_true", help="print the JSON Schema")
    what.add_argument("--write", metavar="DOCS_DIR", type=Path, help="rewrite both docs")
    args = parser.parse_args(argv)
    if args.write is not None:
        write_docs(args.write)
    else:
        sys.stdout.write(markdown() if args.markdown else json_schema_text())


if __name__ == "__main__":
    main()

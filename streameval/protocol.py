"""The Core <-> adapter wire protocol, version `streameval/1` (see docs/protocol.md).

One WebSocket per session. Control messages are JSON text frames with a `type` field; video
frames are binary messages: a 4-byte big-endian header length, a JSON `FrameHeader`, then
the encoded image bytes. Both sides import this module; nothing here does I/O.
"""

from __future__ import annotations

import re
import struct
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    ValidationError,
    model_serializer,
)

PROTOCOL_VERSION = "streameval/1"
# A 960-wide JPEG q90 frame is 60-200 KB; 8 MiB leaves room for 4K frames and long texts
# while still refusing a runaway peer before it exhausts memory.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
MAX_TEXT_CHARS = 200_000
# The largest task text a benchmark record may hold: a question with its options, or an
# instruction, as UTF-8 JSON strings. Far below MAX_MESSAGE_BYTES, so every task the Core
# sends fits one message; a benchmark past it is refused when it is loaded.
MAX_TASK_TEXT_BYTES = 1024 * 1024
# The largest hello an adapter may send, its conditions' settings included: the hello is
# stored with every session (its event and the session's row), so a runaway settings map
# would be stored again and again. A real adapter's hello is well under 4 KiB.
MAX_HELLO_BYTES = 64 * 1024
# The largest count an adapter may report (tokens, images, frames per call or response): a
# billion is beyond any model call, so a bigger or negative one is a broken adapter, refused
# as a malformed message (docs/security.md) instead of being averaged into the metrics.
MAX_COUNT = 10**9
MAX_PIXELS = 10**15  # pixels of one call: a million 4K frames
MAX_NS = 2**63 - 1  # a nanosecond clock reading that still fits a signed 64-bit integer
HEARTBEAT_INTERVAL_S = 20.0
HEARTBEAT_TIMEOUT_S = 20.0
WS_PATH = "/ws"
# The field of an adapter's GET /info naming the Prometheus endpoint of the model server it
# calls (an OpenAI-compatible server such as vLLM): `streameval capacity` reads it there.
INFO_SERVER_METRICS = "server_metrics_url"
# The header of the Core's WebSocket upgrade request that names the optional features it
# reads (comma-separated). Both sides refuse unknown fields, so an adapter sends a feature's
# fields (`Hello.resume`) only to a Core that announced the feature.
FEATURES_HEADER = "Streameval-Features"
RESUME_FEATURE = "resume"
# The Core reads `Workload.prefix_shared_images`.
PREFIX_SHARE_FEATURE = "prefix_share"
# The Core reads `Hello.audio`, `audio_ack` and the workload's audio counts, and streams
# audio chunks to an adapter whose hello declared it consumes them.
AUDIO_FEATURE = "audio"
# The one audio encoding: 16-bit little-endian signed PCM, mono.
AUDIO_ENCODING = "pcm_s16le"
AUDIO_SAMPLE_BYTES = 2


def pcm_seconds(pcm: bytes, sample_rate: int) -> float:
    """How long `pcm` (AUDIO_ENCODING samples) plays at `sample_rate`."""
    return len(pcm) / AUDIO_SAMPLE_BYTES / sample_rate


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Extended(_Message):
    """A message with fields added to `streameval/1` after its first release: each is left
    out of the JSON while it holds its default, so a peer that predates it (and refuses
    unknown fields) reads the message as before."""

    _added_fields: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _without_unused_added_fields(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for name in self._added_fields:
            if getattr(self, name) == type(self).model_fields[name].default:
                data.pop(name, None)
        return data


# ----------------------------------------------------------------------------- conditions


class AdapterConditions(BaseModel):
    """Execution conditions an adapter declares about itself (TRACE section 3)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: Literal["native", "non-native"]
    initiation: Literal["autonomous", "polled", "query"]
    boundary: Literal["model+adapter", "full-system"] = "model+adapter"
    deployment: Literal["in-process", "local-service", "remote-api", "none"] = "in-process"
    model_name: str
    model_version: str = ""
    history: str = ""
    # Named settings that shape what the model sees or keeps (a cache policy, an input
    # mode, video sampling): execution conditions like the fields above, so they are
    # recorded with every session and part of the adapter's identity.
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict)


class AudioConditions(BaseModel):
    """How a session's sound is delivered: PCM chunks of `chunk_s` seconds of video time,
    chunk k covering [k * chunk_s, (k + 1) * chunk_s)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sample_rate: int = Field(16_000, ge=8_000, le=48_000)
    channels: Literal[1] = 1
    encoding: Literal["pcm_s16le"] = AUDIO_ENCODING
    chunk_s: float = Field(0.5, ge=0.02, le=10.0)


class RunConditions(_Extended):
    """Conditions the Core declares for a session: how the timeline is delivered. `audio`
    is set only when the session streams sound, to an adapter whose hello declared it."""

    _added_fields = ("audio",)

    profile: str
    pacing: Literal["logical", "wall_clock"]
    speed: float = 1.0
    fps: float
    max_width: int
    jpeg_quality: int
    qa_history_s: float
    proactive_lead_s: float
    audio: AudioConditions | None = None


# ----------------------------------------------------------------------------- Core -> adapter


class ResumePoint(BaseModel):
    """Where a session stood when its connection was cut: the last frame the Core sent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    last_frame_index: int | None
    last_t: float | None


class SessionStart(_Extended):
    type: Literal["session_start"] = "session_start"
    protocol: str = PROTOCOL_VERSION
    run_id: str
    session_id: str
    record_ids: list[str]
    conditions: RunConditions
    # Set only when the Core reconnects after a cut, to an adapter whose hello declared
    # `resume`: the adapter answers `session_resumed`.
    resume: ResumePoint | None = None

    _added_fields = ("resume",)


class Question(_Message):
    type: Literal["question"] = "question"
    task_id: str
    t: float
    text: str
    options: list[str]


class Instruction(_Message):
    type: Literal["instruction"] = "instruction"
    task_id: str
    t: float
    text: str


class Step(_Message):
    """Logical pacing: "decide now" for the active proactive task at video time `t`."""

    type: Literal["step"] = "step"
    task_id: str
    step: int
    t: float


class SessionEnd(_Message):
    type: Literal["session_end"] = "session_end"
    reason: str = "complete"


class ProtocolError(_Message):
    """Sent by either side just before it closes the socket because of a violation."""

    type: Literal["protocol_error"] = "protocol_error"
    code: str
    message: str


class FrameHeader(_Message):
    type: Literal["frame"] = "frame"
    index: int
    frame_id: str
    t: float
    encoding: Literal["jpeg"] = "jpeg"
    width: int
    height: int
    nbytes: int


class AudioHeader(_Message):
    """One audio chunk (binary, framed like a frame): `samples` PCM samples covering video
    time [start_t, t). Sent once the stream's video time has reached `t`, never before.
    `silent`: the video has no sound, the samples are zeros standing in for it."""

    type: Literal["audio"] = "audio"
    index: int
    start_t: float
    t: float
    sample_rate: int
    samples: int
    encoding: Literal["pcm_s16le"] = AUDIO_ENCODING
    silent: bool = False
    nbytes: int


CoreMessage = Annotated[
    SessionStart | Question | Instruction | Step | SessionEnd | ProtocolError,
    Field(discriminator="type"),
]

# ----------------------------------------------------------------------------- adapter -> Core


class Hello(_Extended):
    type: Literal["hello"] = "hello"
    protocol: str = PROTOCOL_VERSION
    adapter: str
    adapter_version: str = ""
    conditions: AdapterConditions
    # The accelerator serving this session, e.g. "NVIDIA H200 GPU-5f0c...": which device ran
    # which session when a run spreads over many machines. Optional; not part of identity.
    gpu: str | None = Field(default=None, max_length=200)
    # The adapter keeps a session's state for a while after its connection is lost, for a
    # resuming session_start. Sent only to a Core that announced the feature (FEATURES_HEADER).
    resume: bool = False
    # The adapter consumes audio chunks. Sent only to a Core that announced AUDIO_FEATURE;
    # a run that streams sound refuses an adapter that does not declare it.
    audio: bool = False

    _added_fields = ("resume", "audio")


class SessionResumed(_Message):
    """The answer to a resuming session_start: `resumed` true when the adapter kept the
    session's state, false when it starts the session fresh (it no longer holds it)."""

    type: Literal["session_resumed"] = "session_resumed"
    resumed: bool


class FrameAck(_Message):
    type: Literal["frame_ack"] = "frame_ack"
    index: int


class AudioAck(_Message):
    """The audio chunk was taken in (under logical pacing the Core waits for it)."""

    type: Literal["audio_ack"] = "audio_ack"
    index: int


class ResponseStart(_Message):
    type: Literal["response_start"] = "response_start"
    response_id: str
    task_id: str


class ResponseDelta(_Message):
    type: Literal["response_delta"] = "response_delta"
    response_id: str
    seq: int
    text: str = Field(max_length=MAX_TEXT_CHARS)
    snapshot: bool = False


class ResponseFinal(_Message):
    type: Literal["response_final"] = "response_final"
    response_id: str
    text: str = Field(max_length=MAX_TEXT_CHARS)
    output_tokens: int | None = None
    input_tokens: int | None = None


class Silent(_Message):
    type: Literal["silent"] = "silent"
    task_id: str
    step: int | None = None


class Workload(_Extended):
    """What the adapter actually did with the model; every field is optional (missing = unknown).

    `frame_ids` lists every image occurrence submitted in this call, replays included. An
    `evict` record lists the frames a native adapter removed from its state to bound memory;
    its `input_tokens` are the tokens it re-prefilled to do so (0 when it did not).
    `prefix_shared_images` (a `model_call`): how many images at the head of this call's
    prompt the session's previous call had at the head of its own, with the same text before
    each: the images a prefix cache could reuse (0 for a session's first call). Sent only
    to a Core that announced PREFIX_SHARE_FEATURE (the SDK's `Session.workload` sees to it).
    `audio_seconds` / `audio_tokens`: the seconds of sound and the audio tokens the call
    took in; sent only to a Core that announced AUDIO_FEATURE.
    """

    _added_fields = ("prefix_shared_images", "audio_seconds", "audio_tokens")
    type: Literal["workload"] = "workload"
    kind: Literal["model_call", "state_commit", "drop", "replay", "evict"]
    frame_ids: list[str] = Field(default_factory=list)
    images: int | None = None
    pixels: int | None = None
    replayed_frames: int | None = None
    prefix_shared_images: int | None = None
    audio_seconds: float | None = Field(default=None, allow_inf_nan=False)
    audio_tokens: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    started_ns: int | None = None
    ended_ns: int | None = None


class AdapterError(_Message):
    type: Literal["error"] = "error"
    code: str
    message: str = Field(max_length=10_000)
    fatal: bool = False


class SessionClosed(_Message):
    """The adapter's answer to `session_end`: it has flushed everything."""

    type: Literal["session_closed"] = "session_closed"


AdapterMessage = Annotated[
    Hello
    | FrameAck
    | AudioAck
    | ResponseStart
    | ResponseDelta
    | ResponseFinal
    | Silent
    | Workload
    | AdapterError
    | SessionClosed
    | SessionResumed
    | ProtocolError,
    Field(discriminator="type"),
]

_ADAPTER_MESSAGE = TypeAdapter(AdapterMessage)
_CORE_MESSAGE = TypeAdapter(CoreMessage)


_COUNT_LIMITS = {
    "output_tokens": MAX_COUNT,
    "input_tokens": MAX_COUNT,
    "images": MAX_COUNT,
    "replayed_frames": MAX_COUNT,
    "prefix_shared_images": MAX_COUNT,
    "audio_tokens": MAX_COUNT,
    "audio_seconds": MAX_COUNT,
    "pixels": MAX_PIXELS,
    "started_ns": MAX_NS,
    "ended_ns": MAX_NS,
}


def count_problem(message: ResponseFinal | Workload) -> str | None:
    """Why a reported count is impossible (negative, or above its limit), or None.

    Checked by the Core where it receives a message, not in the models, so the wire
    schema (and the adapter SDK, which builds these models) stays as it is."""
    for name, limit in _COUNT_LIMITS.items():
        value = getattr(message, name, None)
        if value is None:
            continue
        # Never str() the value: an integer of thousands of digits cannot be printed.
        if value < 0:
            return f"{message.type}.{name} is negative"
        if value > limit:
            return f"{message.type}.{name} is above its limit {limit}"
    return None


class ProtocolViolation(Exception):
    """A message that is malformed, oversized or out of order."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _parse(adapter: TypeAdapter, raw: str | bytes, side: str):
    if isinstance(raw, bytes):
        raise ProtocolViolation("unexpected_binary", f"{side} sent a binary message")
    try:
        return adapter.validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "message"
        raise ProtocolViolation("malformed", f"{where}: {first['msg']}") from None


def parse_adapter_message(raw: str | bytes):
    return _parse(_ADAPTER_MESSAGE, raw, "adapter")


# A frame_ack exactly as the SDK formats it: the one adapter message of every frame.
_CANONICAL_ACK = re.compile(r'\{"type":"frame_ack","index":(0|[1-9][0-9]{0,17})\}')


def frame_ack_index(raw: object) -> int | None:
    """The index of a frame_ack written in its canonical form, else None: the Core reads
    those without the parser (what `parse_adapter_message` would make of them, a
    `FrameAck`, at a tenth of its cost); anything else, spaced or reordered, is parsed."""
    if type(raw) is not str:
        return None
    match = _CANONICAL_ACK.fullmatch(raw)
    return None if match is None else int(match[1])


def parse_core_message(raw: str | bytes):
    return _parse(_CORE_MESSAGE, raw, "core")


_HEADER_LEN = struct.Struct(">I")


def encode_frame(header: FrameHeader | AudioHeader, payload: bytes) -> bytes:
    """A binary message: a frame's or an audio chunk's header, then its payload."""
    head = header.model_dump_json().encode()
    return _HEADER_LEN.pack(len(head)) + head + payload


_BINARY_HEADER = TypeAdapter(Annotated[FrameHeader | AudioHeader, Field(discriminator="type")])


def decode_binary(message: bytes) -> tuple[FrameHeader | AudioHeader, bytes]:
    """A binary message's header (a frame's or an audio chunk's) and its payload."""
    if len(message) < _HEADER_LEN.size:
        raise ProtocolViolation("malformed", "binary message shorter than its header length")
    (size,) = _HEADER_LEN.unpack_from(message)
    end = _HEADER_LEN.size + size
    try:
        header = _BINARY_HEADER.validate_json(message[_HEADER_LEN.size : end])
    except ValidationError as exc:
        raise ProtocolViolation("malformed", f"binary header: {exc}") from None
    payload = message[end:]
    if len(payload) != header.nbytes:
        raise ProtocolViolation("malformed", f"{header.type} payload size differs from its header")
    return header, payload


def decode_frame(message: bytes) -> tuple[FrameHeader, bytes]:
    header, payload = decode_binary(message)
    if not isinstance(header, FrameHeader):
        raise ProtocolViolation("malformed", "expected a frame, got an audio chunk")
    return header, payload


def dump(message: _Message) -> str:
    return message.model_dump_json()

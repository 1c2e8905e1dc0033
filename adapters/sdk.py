"""The adapter SDK: subclass `Adapter`, implement a few async hooks, `serve()` it.

One `Adapter` instance serves many sessions; per-session state lives on the `Session`
object the hooks receive. Hooks run in the order the Core's messages arrive, one at a time
per session, so an adapter sees the stream exactly as causally as the Core sends it.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.settings import with_config_settings
from streameval.protocol import (
    AUDIO_FEATURE,
    MAX_HELLO_BYTES,
    PREFIX_SHARE_FEATURE,
    AdapterConditions,
    Instruction,
    Question,
    ResponseDelta,
    ResponseFinal,
    ResponseStart,
    RunConditions,
    Silent,
    Step,
    Workload,
    pcm_seconds,
)

Send = Callable[[str], Awaitable[None]]
T = TypeVar("T")


async def load_in_thread(load: Callable[[], T], name: str = "adapter-load") -> T:
    """Run a blocking load in a daemon thread and await its result, so the event loop (and
    with it `/healthz`, `/info` and heartbeats) stays free. Unlike `asyncio.to_thread`, an
    adapter stopped mid-load (SIGTERM) does not wait for the load to finish."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result = load()
        except BaseException as exc:  # handed to the awaiting coroutine
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future


@dataclass(frozen=True)
class Frame:
    """One delivered video frame: its identity, its video time and the encoded image."""

    index: int
    frame_id: str
    t: float
    width: int
    height: int
    data: bytes

    def rgb(self):
        """Decode to an HxWx3 uint8 numpy array (Pillow + numpy, imported lazily)."""
        import numpy as np
        from PIL import Image

        with Image.open(io.BytesIO(self.data)) as image:
            return np.asarray(image.convert("RGB"))


@dataclass(frozen=True)
class AudioChunk:
    """One delivered chunk of sound: 16-bit mono PCM covering video time [start_t, t).
    `silent`: the video has no sound; the samples are zeros standing in for it."""

    index: int
    start_t: float
    t: float
    sample_rate: int
    pcm: bytes
    silent: bool = False

    @property
    def duration_s(self) -> float:
        return pcm_seconds(self.pcm, self.sample_rate)

    def samples(self):
        """The samples as an int16 numpy array (numpy imported lazily)."""
        import numpy as np

        return np.frombuffer(self.pcm, dtype="<i2")


@dataclass
class Session:
    """One stream: what the Core declared, the active task and the adapter's own state."""

    run_id: str
    session_id: str
    record_ids: list[str]
    conditions: RunConditions
    send: Send
    task: Question | Instruction | None = None
    state: dict[str, Any] = field(default_factory=dict)
    responder: Responder | None = None
    # Work started with `start_task` and not yet done.
    tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    # The optional features the connected Core reads (FEATURES_HEADER).
    core_features: frozenset[str] = frozenset()

    async def workload(self, kind: str = "model_call", **fields: Any) -> None:
        """Record what the model actually did; `frame_ids` lists every submitted image.
        `prefix_shared_images`, `audio_seconds` and `audio_tokens` go only to a Core that
        reads them (it refuses unknown fields)."""
        if PREFIX_SHARE_FEATURE not in self.core_features:
            fields.pop("prefix_shared_images", None)
        if AUDIO_FEATURE not in self.core_features:
            fields.pop("audio_seconds", None)
            fields.pop("audio_tokens", None)
        await self.send(Workload(kind=kind, **fields).model_dump_json())

    def start_task(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run `work` beside the hooks (a decision nobody waits for, under wall-clock
        pacing). Like a running hook, it is cancelled when the session's connection ends,
        a connection kept for a resume included: its answer could not reach the Core."""
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def cancel_tasks(self) -> None:
        """Cancel the work `start_task` started and wait until it is done."""
        running = [task for task in self.tasks if not task.done()]
        for task in running:
            task.cancel("the connection to the Core ended")
        await asyncio.gather(*running, return_exceptions=True)

    def reattach(self, send: Send, core_features: frozenset[str]) -> None:
        """Go on over a new connection (a resumed session): what the session sends from
        now on goes there, the open task's responder included, in what that Core reads."""
        self.send = send
        self.core_features = core_features
        if self.responder is not None:
            self.responder = Responder(send, self.responder.task_id)


class ResponseStream:
    """An open response episode; tokens go out as deltas the moment they are produced."""

    def __init__(self, responder: Responder, response_id: str) -> None:
        self._responder = responder
        self.response_id = response_id
        self._seq = 0
        self._parts: list[str] = []
        self._started = False

    async def token(self, text: str) -> None:
        if not self._started:
            self._started = True
            await self._responder._send_model(
                ResponseStart(response_id=self.response_id, task_id=self._responder.task_id)
            )
        self._parts.append(text)
        await self._responder._send_model(
            ResponseDelta(response_id=self.response_id, seq=self._seq, text=text)
        )
        self._seq += 1

    async def finish(self, output_tokens: int | None = None, input_tokens: int | None = None):
        if not self._started:
            await self.token("")
        # Unknown token counts stay unknown (null): deltas are not necessarily tokens.
        await self._responder._send_model(
            ResponseFinal(
                response_id=self.response_id,
                text="".join(self._parts),
                output_tokens=output_tokens,
                input_tokens=input_tokens,
            )
        )

    async def __aenter__(self) -> ResponseStream:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            await self.finish()


class Responder:
    """What a hook uses to answer the Core: speak, stream, stay silent, report workload."""

    _ids = itertools.count()

    def __init__(self, send: Send, task_id: str) -> None:
        self._send = send
        self.task_id = task_id
        self.decided = False

    async def _send_model(self, message) -> None:
        self.decided = True
        await self._send(message.model_dump_json())

    def stream(self) -> ResponseStream:
        return ResponseStream(self, f"r{next(self._ids)}")

    async def say(self, text: str, output_tokens: int | None = None) -> None:
        """A whole answer at once (one delta)."""
        response = self.stream()
        await response.token(text)
        await response.finish(output_tokens=output_tokens)

    async def say_tokens(self, tokens: AsyncIterator[str], input_tokens: int | None = None):
        response = self.stream()
        count = 0
        async for token in tokens:
            await response.token(token)
            count += 1
        await response.finish(output_tokens=count, input_tokens=input_tokens)

    async def silent(self, step: int | None = None) -> None:
        await self._send_model(Silent(task_id=self.task_id, step=step))


@dataclass(frozen=True)
class Readiness:
    """Whether an adapter can take sessions: `loading` while `Adapter.start` runs, `ready`,
    or `failed` (loading failed, or the model became unusable) with the reason."""

    state: Literal["loading", "ready", "failed"]
    reason: str | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    def describe(self) -> str:
        """`ok`, `loading` or `failed: REASON`: the body of /healthz."""
        if self.state == "ready":
            return "ok"
        return self.state if self.reason is None else f"{self.state}: {self.reason}"


READY = Readiness("ready")
LOADING = Readiness("loading")


class Adapter:
    """Base class of every adapter. Override the hooks you need.

    `on_step` defaults to silence, and the SDK sends an explicit silent decision for any
    step whose hook returned without deciding, so a step is never left unanswered.

    A slow-loading adapter overrides `start`: the server runs it once it listens, in the
    background, while `/healthz` answers 503 `loading` and sessions are refused as not
    ready; `/info` and heartbeats keep working. A blocking load belongs in a worker thread
    (`await asyncio.to_thread(...)`), so the event loop stays free.
    """

    name: ClassVar[str] = "adapter"
    version: ClassVar[str] = "0"
    # Class-level for fixed adapters; an adapter built from options may set it per instance.
    conditions: AdapterConditions
    # The adapter's options (a pydantic model): `streameval adapter serve NAME --config FILE
    # -A key=value` validates them and passes an instance to `__init__`. None: no options.
    Config: ClassVar[type[BaseModel] | None] = None
    # How long a session's state outlives a connection lost without session_end, for the
    # Core to reconnect and resume the session (docs/protocol.md, "Reconnect and resume").
    # 0: the adapter does not resume; a reconnected session starts fresh.
    resume_grace_s: float = 30.0
    # The adapter takes the stream's sound (`on_audio`): its hello declares it, and only
    # then does a run that streams audio accept it. An instance may set it from its options.
    consumes_audio: bool = False

    async def start(self) -> None:
        """Load what serving needs (weights, an engine). Raise to fail the adapter: the
        exception's text is the reason /healthz and the process report."""

    @property
    def readiness(self) -> Readiness:
        # Set by the server and by `fail`; an adapter never started is ready (in-process
        # use, tests).
        return self.__dict__.get("_readiness", READY)

    @readiness.setter
    def readiness(self, value: Readiness) -> None:
        self.__dict__["_readiness"] = value

    def fail(self, reason: str) -> None:
        """Stop taking sessions for good: the model is unusable (e.g. its engine died)."""
        self.readiness = Readiness("failed", reason)

    async def on_session_start(self, session: Session) -> None:
        """A new session: reset per-session state on `session.state`. A resumed session
        (its connection was cut, the Core reconnected) is not started again: the hooks go
        on with the same `Session`, its state as it was."""

    async def on_frame(self, session: Session, frame: Frame) -> None:
        """A frame arrived. Autonomous adapters may speak here via `session.responder`."""

    async def on_audio(self, session: Session, chunk: AudioChunk) -> None:
        """An audio chunk arrived (only to an adapter with `consumes_audio`), in stream
        order with the frames: it ends at or before the next frame's time."""

    async def on_question(self, session: Session, question: Question, respond: Responder) -> None:
        raise NotImplementedError(f"adapter {self.name} does not answer questions")

    async def on_instruction(
        self, session: Session, instruction: Instruction, respond: Responder
    ) -> None:
        """A monitoring instruction arrived; later frames and steps belong to it."""

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await respond.silent(step.step)

    async def on_session_end(self, session: Session) -> None:
        """The stream is over; free per-session resources. After a connection lost without
        session_end, called once `resume_grace_s` passed without the session resuming."""

    def gpu_identity(self) -> str | None:
        """The accelerator this adapter serves from, for the hello (None: none or unknown).
        Model adapters name their device; an adapter in front of a server elsewhere may
        read it from that server."""
        return None

    def info(self) -> dict[str, Any]:
        return {
            "adapter": self.name,
            "adapter_version": self.version,
            "conditions": self.conditions.model_dump(),
            "audio": self.consumes_audio,
        }


# The conditions' share of a hello; the rest (name, version, an accelerator of at most 200
# characters) is small.
MAX_CONDITIONS_BYTES = MAX_HELLO_BYTES - 4096


def check_conditions(adapter: Adapter, config: BaseModel | None = None) -> None:
    """Refuse, in one line naming the field, an adapter whose declared conditions are missing
    or invalid: when it is loaded, rather than in every session's hello. `config`, the
    options it was built from, joins its settings (adapters/settings.py)."""
    declared = getattr(adapter, "conditions", None)
    name = type(adapter).__name__
    if declared is None:
        raise AdapterSetupError(
            f"adapter {name} declares no conditions: set `conditions = AdapterConditions(...)`"
        )
    if not isinstance(declared, AdapterConditions):
        try:
            adapter.conditions = AdapterConditions.model_validate(declared)
        except ValidationError as exc:
            raise AdapterSetupError(f"adapter {name}: {conditions_problem(exc)}") from None
    if config is not None:
        adapter.conditions = with_config_settings(adapter.conditions, config)
    size = len(adapter.conditions.model_dump_json().encode())
    if size > MAX_CONDITIONS_BYTES:
        raise AdapterSetupError(
            f"adapter {name}: its conditions are {size} bytes of JSON, over the limit of "
            f"{MAX_CONDITIONS_BYTES} (a hello carries at most {MAX_HELLO_BYTES} bytes, "
            "settings included; the Core refuses a larger one)"
        )


def conditions_problem(exc: ValidationError) -> str:
    """What is wrong with declared conditions (AdapterConditions' validation error), in one
    line naming the field."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"])
    if first["type"] == "missing":
        return f"conditions: the field {field!r} is required (AdapterConditions({field}=...))"
    if first["type"] == "extra_forbidden":
        known = ", ".join(AdapterConditions.model_fields)
        return f"conditions: unknown field {field!r} (fields: {known})"
    return f"conditions: {field}: {first['msg']} (got {first['input']!r})"

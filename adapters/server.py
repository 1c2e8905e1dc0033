"""Expose any `Adapter` as a WebSocket service: `/ws` for sessions, `/healthz`, `/info`.

Readiness: once listening, the server runs the adapter's `start` in the background. Until it
returns, `/healthz` answers 503 `loading` and a session's WebSocket upgrade is refused with
503 `not_ready: ...` (the Core waits for readiness before it starts sessions); `/info` and
heartbeats keep working. A `start` that raises makes the adapter `failed`: `/healthz` answers
503 `failed: REASON` for `failed_linger_s`, then `serve` raises `AdapterStartFailed`. An
adapter that calls `fail(reason)` later (its engine died) stays up and refuses new sessions
the same way, so sessions in flight still get their errors.

Resume: a session whose connection is lost without session_end (a network failure, not a
close) keeps its `Session` for the adapter's `resume_grace_s` on a shelf; a Core that
reconnects and sends a resuming session_start gets it back, state and all, and is told so
(`session_resumed`). Past the grace period the session ends (`on_session_end`).

Abandoned work: when a connection ends (the Core closed it, gave up on the session, or the
network dropped it), the hook still running for it is cancelled (inbox.py) and nothing it
sends gets out; `on_session_end` then runs to its end, the connection's end does not cut it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from http import HTTPStatus

from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed, ConnectionClosedError
from websockets.http11 import Request, Response

from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.inbox import Inbox
from streameval.adapters.reading import PausableReading
from streameval.adapters.sdk import (
    LOADING,
    READY,
    Adapter,
    AudioChunk,
    Frame,
    Readiness,
    Responder,
    Session,
)
from streameval.delivery import Arrival, Delivering
from streameval.fast_send import send_message
from streameval.open_files import raise_open_file_limit
from streameval.protocol import (
    AUDIO_FEATURE,
    FEATURES_HEADER,
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    PROTOCOL_VERSION,
    RESUME_FEATURE,
    WS_PATH,
    AdapterError,
    AudioHeader,
    Hello,
    Instruction,
    ProtocolError,
    ProtocolViolation,
    Question,
    SessionClosed,
    SessionEnd,
    SessionResumed,
    SessionStart,
    Step,
    decode_binary,
    parse_core_message,
)

log = logging.getLogger("streameval.adapter")

# How long a failed start keeps answering `/healthz` with its reason before `serve` gives up,
# so a Core waiting for readiness reads why rather than a refused connection.
FAILED_LINGER_S = 5.0
# The body prefix of a refused session upgrade (HTTP 503), for clients to recognise.
NOT_READY = "not_ready"


class AdapterStartFailed(AdapterSetupError):
    """The adapter's `start` raised: it cannot serve."""


SessionKey = tuple[str, str]  # (run_id, session_id)


class _Shelf:
    """Sessions whose connection was lost without session_end, kept `grace_s` for a
    resuming session_start, then ended; and which sessions a connection holds now."""

    def __init__(self, adapter: Adapter) -> None:
        self.adapter = adapter
        self.grace_s = adapter.resume_grace_s
        self._kept: dict[SessionKey, tuple[Session, asyncio.TimerHandle]] = {}
        # A session held by a connection -> set once that connection let it go.
        self._held: dict[SessionKey, asyncio.Event] = {}
        self._ending: set[asyncio.Task[None]] = set()

    def hold(self, key: SessionKey) -> asyncio.Event:
        """A connection started the session: a kept copy of it (an older attempt) ends."""
        self._expire(key)
        released = self._held[key] = asyncio.Event()
        return released

    def release(self, key: SessionKey, released: asyncio.Event, session: Session | None) -> None:
        """The connection let the session go: kept for a resume when `session` is given."""
        if self._held.get(key) is released:
            del self._held[key]
        if session is not None:
            expiry = asyncio.get_running_loop().call_later(self.grace_s, self._expire, key)
            self._kept[key] = (session, expiry)
        released.set()

    async def resume(self, key: SessionKey) -> Session | None:
        """The kept session, or None (never kept, or its grace passed). A connection the
        Core has cut may still be finishing a hook: it is waited for, up to the grace."""
        released = self._held.get(key)
        if released is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), self.grace_s)
        kept = self._kept.pop(key, None)
        if kept is None:
            return None
        session, expiry = kept
        expiry.cancel()
        return session

    def _expire(self, key: SessionKey) -> None:
        kept = self._kept.pop(key, None)
        if kept is None:
            return
        session, expiry = kept
        expiry.cancel()
        ending = asyncio.ensure_future(self.adapter.on_session_end(session))
        self._ending.add(ending)  # held until done: a task only weakly referenced may vanish
        ending.add_done_callback(self._ending.discard)


class CoreConnection(Delivering, ServerConnection):
    """A server connection that hands each of the Core's messages to the session's
    `Inbox` as soon as it is parsed (delivery.py)."""


class _Connection:
    """The adapter side of one session: the Core's messages in order, hooks called inline."""

    def __init__(self, adapter: Adapter, ws: CoreConnection, shelf: _Shelf) -> None:
        self.adapter = adapter
        self.ws = ws
        self.shelf = shelf
        self.session: Session | None = None
        self.released: asyncio.Event | None = None  # the shelf's mark while holding it
        self.ending: asyncio.Future[None] | None = None  # on_session_end, once called
        announced = ws.request.headers.get(FEATURES_HEADER, "") if ws.request else ""
        self.features = frozenset(name.strip() for name in announced.split(","))
        # Declared only to a Core that reads the field (the hello refuses unknown fields).
        self.resumable = adapter.resume_grace_s > 0 and RESUME_FEATURE in self.features
        self.hears = adapter.consumes_audio and AUDIO_FEATURE in self.features

    async def send(self, text: str) -> None:
        await send_message(self.ws, text)

    async def run(self) -> None:
        hello = Hello(
            adapter=self.adapter.name,
            adapter_version=self.adapter.version,
            conditions=self.adapter.conditions,
            gpu=self.adapter.gpu_identity(),
            resume=self.resumable,
            audio=self.hears,
        )
        await self.send(hello.model_dump_json())
        reading = PausableReading(self.ws)
        inbox = Inbox(self.handle, pause=reading.pause, resume=reading.resume)
        self.ws.deliver_to(inbox.arrived, inbox.closed)
        lost = False
        try:
            while await inbox.handle_next():
                pass
        except ProtocolViolation as exc:
            await self.send(ProtocolError(code=exc.code, message=exc.message).model_dump_json())
            await self.ws.close(1002, exc.code)
        except ConnectionClosedError:
            lost = True  # no close handshake: a network failure, which a resume may follow
        except ConnectionClosed:
            pass
        finally:
            await self.leave(lost)

    async def leave(self, lost: bool) -> None:
        """Keep a session whose connection was lost for a resume; end any other."""
        if self.session is None or self.released is None:
            return
        key = (self.session.run_id, self.session.session_id)
        await self.session.cancel_tasks()
        keep = lost and self.resumable and self.ending is None
        if not keep:
            await self.end_session()
        self.shelf.release(key, self.released, self.session if keep else None)

    async def end_session(self) -> None:
        """Call the adapter's on_session_end exactly once, however the session ends, and
        wait for it. The connection's end does not cut it short (it cancels the hooks a
        session abandons, not its cleanup): a wait cancelled here is waited for again by
        `leave`."""
        if self.session is None:
            return
        if self.ending is None:
            self.ending = asyncio.ensure_future(self.adapter.on_session_end(self.session))
        await asyncio.shield(self.ending)

    async def handle(self, raw: Arrival) -> bool:
        """Dispatch one message; False once the session is over."""
        if isinstance(raw, bytes):
            await self.on_binary(raw)
            return True
        if isinstance(raw, UnicodeDecodeError):
            reason = f"text message is not UTF-8: {raw.reason} at position {raw.start}"
            raise ProtocolViolation("malformed", reason)
        message = parse_core_message(raw)
        if isinstance(message, ProtocolError):
            log.warning("core reported a protocol error: %s", message.message)
            return False
        if isinstance(message, SessionStart):
            await self.on_session_start(message)
            return True
        session = self.require_session(message.type)
        if isinstance(message, SessionEnd):
            # Finish the adapter's own work first, so nothing it sends follows session_closed.
            await self.end_session()
            await self.send(SessionClosed().model_dump_json())
            return False
        try:
            await self.dispatch_task(session, message)
        except NotImplementedError as exc:
            error = AdapterError(code="unsupported", message=str(exc), fatal=True)
            await self.send(error.model_dump_json())
        return True

    async def dispatch_task(self, session: Session, message: Question | Instruction | Step):
        if isinstance(message, Step):
            respond = session.responder or Responder(self.send, message.task_id)
            respond.decided = False
            await self.adapter.on_step(session, message, respond)
            if not respond.decided:
                await respond.silent(message.step)
            return
        session.task = message
        session.responder = Responder(self.send, message.task_id)
        if isinstance(message, Question):
            await self.adapter.on_question(session, message, session.responder)
        else:
            await self.adapter.on_instruction(session, message, session.responder)

    def require_session(self, what: str) -> Session:
        if self.session is None:
            raise ProtocolViolation("out_of_order", f"{what} before session_start")
        return self.session

    async def on_session_start(self, message: SessionStart) -> None:
        if self.session is not None:
            raise ProtocolViolation("out_of_order", "second session_start on one connection")
        if message.protocol != PROTOCOL_VERSION:
            raise ProtocolViolation("version", f"core speaks {message.protocol}")
        key = (message.run_id, message.session_id)
        kept = None
        if message.resume is not None and self.resumable:
            kept = await self.shelf.resume(key)
        self.released = self.shelf.hold(key)
        if kept is not None:
            kept.reattach(self.send, self.features)
            self.session = kept
        else:
            self.session = Session(
                run_id=message.run_id,
                session_id=message.session_id,
                record_ids=list(message.record_ids),
                conditions=message.conditions,
                send=self.send,
                core_features=self.features,
            )
            await self.adapter.on_session_start(self.session)
        if message.resume is not None:
            await self.send(SessionResumed(resumed=kept is not None).model_dump_json())

    async def on_binary(self, raw: bytes) -> None:
        """A frame or an audio chunk: handed to its hook, then acknowledged."""
        session = self.require_session("frame")
        header, payload = decode_binary(raw)
        if isinstance(header, AudioHeader):
            await self.on_audio(session, header, payload)
            return
        frame = Frame(
            index=header.index,
            frame_id=header.frame_id,
            t=header.t,
            width=header.width,
            height=header.height,
            data=payload,
        )
        await self.adapter.on_frame(session, frame)
        # Formatted, not serialised: an ack per frame, and the index is a validated int.
        await self.send(f'{{"type":"frame_ack","index":{header.index}}}')

    async def on_audio(self, session: Session, header: AudioHeader, payload: bytes) -> None:
        if not self.hears:
            raise ProtocolViolation("out_of_order", "audio chunk to an adapter that declared none")
        chunk = AudioChunk(
            index=header.index,
            start_t=header.start_t,
            t=header.t,
            sample_rate=header.sample_rate,
            pcm=payload,
            silent=header.silent,
        )
        await self.adapter.on_audio(session, chunk)
        await self.send(f'{{"type":"audio_ack","index":{header.index}}}')


def not_ready_message(adapter: Adapter, readiness: Readiness) -> str:
    """What a session refused before the adapter is ready is told (one line)."""
    if readiness.state == "loading":
        what = "is still loading; GET /healthz answers 200 once it is ready"
    else:
        what = f"failed and takes no sessions: {readiness.reason}"
    return f"{NOT_READY}: adapter {adapter.name} {what}"


def _http_routes(adapter: Adapter):
    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.split("?", 1)[0]
        readiness = adapter.readiness
        if path == WS_PATH:
            if readiness.ready:
                return None
            body = not_ready_message(adapter, readiness)
            response = connection.respond(HTTPStatus.SERVICE_UNAVAILABLE, body + "\n")
            if readiness.state == "loading":
                response.headers["Retry-After"] = "5"
            return response
        if path == "/healthz":
            status = HTTPStatus.OK if readiness.ready else HTTPStatus.SERVICE_UNAVAILABLE
            return connection.respond(status, readiness.describe() + "\n")
        if path == "/info":
            body = json.dumps({**adapter.info(), "protocol": PROTOCOL_VERSION})
            response = connection.respond(HTTPStatus.OK, body + "\n")
            response.headers["Content-Type"] = "application/json"
            return response
        return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")

    return process_request


def _overrides_start(adapter: Adapter) -> bool:
    return getattr(type(adapter).start, "__func__", type(adapter).start) is not Adapter.start


async def start_adapter(adapter: Adapter) -> None:
    """Run `adapter.start`, setting its readiness: ready, or failed with the reason."""
    try:
        await adapter.start()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # any failure to load is the adapter's one reason
        reason = str(exc) or type(exc).__name__
        if not isinstance(exc, AdapterSetupError):
            reason = f"{type(exc).__name__}: {reason}"
            log.debug("adapter %s failed to start", adapter.name, exc_info=True)
        adapter.readiness = Readiness("failed", reason.splitlines()[0] if reason else reason)
        return
    if adapter.readiness.state == "loading":
        adapter.readiness = READY


async def serve(
    adapter: Adapter,
    host: str = "127.0.0.1",
    port: int = 8765,
    ready: Callable[[int], None] | None = None,
    failed_linger_s: float = FAILED_LINGER_S,
) -> None:
    """Serve `adapter` until cancelled. `ready(port)` is called once it listens (the model
    may still be loading: see the module's readiness rules). Raises `AdapterStartFailed`
    `failed_linger_s` after the adapter's `start` failed."""
    raise_open_file_limit()  # a session is an open socket: a thousand would hit the soft limit
    loads = _overrides_start(adapter)
    if loads:
        adapter.readiness = LOADING

    shelf = _Shelf(adapter)

    async def handler(ws: ServerConnection) -> None:
        assert isinstance(ws, CoreConnection)
        await _Connection(adapter, ws, shelf).run()

    async with ws_serve(
        handler,
        host,
        port,
        compression=None,  # permessage-deflate stalls the loop on frame traffic (DESIGN.md)
        max_size=MAX_MESSAGE_BYTES,
        ping_interval=HEARTBEAT_INTERVAL_S,
        ping_timeout=HEARTBEAT_TIMEOUT_S,
        process_request=_http_routes(adapter),
        create_connection=CoreConnection,
    ) as server:
        bound = server.sockets[0].getsockname()[1]
        if ready is not None:
            ready(bound)
        if loads:
            await start_adapter(adapter)
            readiness = adapter.readiness
            if readiness.state == "failed":
                await asyncio.sleep(failed_linger_s)
                raise AdapterStartFailed(
                    f"adapter {adapter.name} failed to start: {readiness.reason}"
                )
        await asyncio.Future()

"""The WebSocket to an adapter: opening it, and naming why it was lost."""

from __future__ import annotations

import time
from collections.abc import Callable
from http import HTTPStatus
from typing import NoReturn
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.frames import CloseCode, Frame, Opcode
from websockets.protocol import CLOSED, Event

from streameval.core.failures import FailureStage, SessionFailure
from streameval.core.readiness import AdapterNotReady, wait_until_ready
from streameval.events import FailureCause
from streameval.fast_send import send_message, writable, write
from streameval.protocol import (
    FEATURES_HEADER,
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    RESUME_FEATURE,
    WS_PATH,
)

# An adapter's messages are small JSON objects; thousands of fragments are an attack on the
# Core's memory (each fragment is an object), not a message.
MAX_FRAGMENTS = 1024


class AdapterConnection(ClientConnection):
    """A client connection that hands each adapter message to a callback as soon as its
    last frame is parsed, with its arrival time, and tells another when it is gone.

    The session's receive side is then a plain function run inside `data_received`: no
    task waking up, no queue and no future per message (with `recv()` those were a third of
    the Core's cost per frame). Text arrives as `str`, binary as `bytes`; a text message
    that is not UTF-8 arrives as the UnicodeDecodeError. What arrives before `deliver_to`
    (the hello may come with the handshake's response) is held and handed over then.
    `recv()` is not used on it: it would wait for messages that never reach its queue."""

    _on_message: Callable[[Arrival, int], None] | None = None
    _on_closed: Callable[[ConnectionClosed], None] | None = None
    _held: list[tuple[Arrival, int]] | None = None
    _fragments: list[Frame] | None = None
    _refused = False  # a message was refused and the connection is closing

    def deliver_to(
        self,
        on_message: Callable[[Arrival, int], None],
        on_closed: Callable[[ConnectionClosed], None],
    ) -> None:
        self._on_message, self._on_closed = on_message, on_closed
        held, self._held = self._held or [], None
        for raw, arrived in held:
            on_message(raw, arrived)
        if self.protocol.state is CLOSED:
            on_closed(self.protocol.close_exc)

    async def cut(self) -> None:
        """Drop the connection as a network failure would: no close handshake, and
        nothing the adapter still sends is delivered (it is lost with the connection).
        Returns once the socket is closed."""
        self.deliver_to(_ignore, _ignore)
        self.transport.abort()
        await self.wait_closed()

    async def send_frame(self, data: bytes) -> None:
        """A frame's message: `send`, without its per-message machinery (fast_send.py)."""
        await send_message(self, data)

    def can_send_now(self) -> bool:
        """Whether `send_now` may write a message at once (fast_send.writable)."""
        return writable(self)

    def send_now(self, data: bytes) -> None:
        """Write a frame's message at once; only when `can_send_now`."""
        write(self, data)

    async def recv(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise TypeError("an AdapterConnection hands each message to deliver_to's callback")

    def process_event(self, event: Event) -> None:
        if self.response is None or not isinstance(event, Frame):
            super().process_event(event)
            return
        if event.opcode is Opcode.PONG:
            self.acknowledge_pings(bytes(event.data))
        if event.opcode not in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT) or self._refused:
            return
        arrived = time.monotonic_ns()
        if not event.fin or self._fragments is not None:
            if self._fragments is None:
                self._fragments = []
            self._fragments.append(event)
            if len(self._fragments) > MAX_FRAGMENTS:
                # The frames parsed with this one still come here: none is a message.
                self._fragments, self._refused = None, True
                self.protocol.fail(CloseCode.MESSAGE_TOO_BIG, "too many fragments")
                self.send_data()
                return
            if not event.fin:
                return
            first, data = self._fragments[0], b"".join(f.data for f in self._fragments)
            self._fragments = None
        else:
            first, data = event, event.data
        self._deliver(_decoded(first.opcode, data), arrived)

    def _deliver(self, raw: Arrival, arrived: int) -> None:
        if self._on_message is not None:
            self._on_message(raw, arrived)
        else:
            if self._held is None:
                self._held = []
            self._held.append((raw, arrived))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._on_closed is not None:
            self._on_closed(self.protocol.close_exc)


# What the connection hands over: a message, or a text message that was not UTF-8.
Arrival = str | bytes | UnicodeDecodeError


def _ignore(*_args: object) -> None:
    """Where a cut connection's messages and close go."""


def _decoded(opcode: Opcode, data: bytes | bytearray | memoryview) -> Arrival:
    if opcode is Opcode.BINARY:
        return bytes(data)
    try:
        return bytes(data).decode()
    except UnicodeDecodeError as exc:
        return exc


async def connect_adapter(
    endpoint_url: str, timeout_s: float, ready_timeout_s: float = 0.0
) -> AdapterConnection:
    """Open a session's socket, or fail the session at stage `connect`.

    An adapter that refuses the session as not ready (503) while its model loads is waited
    for (its /healthz, up to `ready_timeout_s` in all) and asked again; one that failed, or
    stays not ready, fails the session with the adapter's reason, as an infrastructure
    failure (`--resume --retry-failed` redoes it)."""
    deadline = time.monotonic() + ready_timeout_s
    while True:
        try:
            return await _connect(endpoint_url, timeout_s)
        except InvalidStatus as exc:
            refusal = _not_ready(exc)
            if refusal is None:
                raise _connect_failure(endpoint_url, exc) from None
        left = deadline - time.monotonic()
        if left > 0:
            try:
                await wait_until_ready(endpoint_url, left, notice=None)
                continue
            except AdapterNotReady as exc:
                if not exc.failed:  # timed out (a failure's reason is in the refusal)
                    refusal += f"; {exc}"
            except httpx.HTTPError as exc:
                refusal += f"; then /healthz: {exc or type(exc).__name__}"
        raise SessionFailure(
            FailureStage.CONNECT,
            f"adapter at {endpoint_url} refused the session: {refusal}",
            FailureCause.INFRASTRUCTURE,
        )


def _not_ready(exc: InvalidStatus) -> str | None:
    """The adapter's reason when it refused the session as not ready (503), else None."""
    response = exc.response
    if response.status_code != HTTPStatus.SERVICE_UNAVAILABLE:
        return None
    body = response.body.decode("utf-8", "replace").strip() if response.body else ""
    return body.splitlines()[0] if body else "503 Service Unavailable (not ready)"


async def _connect(endpoint_url: str, timeout_s: float) -> AdapterConnection:
    try:
        connection = await connect(
            endpoint_url,
            create_connection=AdapterConnection,
            compression=None,  # permessage-deflate stalls frame traffic (DESIGN.md)
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=timeout_s,
            ping_interval=HEARTBEAT_INTERVAL_S,
            ping_timeout=HEARTBEAT_TIMEOUT_S,
            close_timeout=2,
            # The optional features this Core reads (the adapter may then declare them).
            additional_headers={FEATURES_HEADER: RESUME_FEATURE},
        )
    except InvalidStatus:
        raise
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        raise _connect_failure(endpoint_url, exc) from None
    assert isinstance(connection, AdapterConnection)
    return connection


def _connect_failure(endpoint_url: str, exc: Exception) -> SessionFailure:
    reason = f"cannot connect to {endpoint_url}: {exc or type(exc).__name__}"
    if not urlsplit(endpoint_url).path.endswith(WS_PATH):
        reason += f" (adapters serve sessions at {WS_PATH}: ws://HOST:PORT{WS_PATH})"
    return SessionFailure(FailureStage.CONNECT, reason, FailureCause.INFRASTRUCTURE)


def closed_failure(exc: BaseException) -> SessionFailure:
    """A lost connection: infrastructure, unless the adapter's message was oversized (a
    protocol violation, which a rerun would repeat)."""
    oversized = isinstance(exc, ConnectionClosed) and exc.sent is not None and exc.sent.code == 1009
    return SessionFailure(
        FailureStage.STREAMING,
        closed_reason(exc),
        FailureCause.ADAPTER if oversized else FailureCause.INFRASTRUCTURE,
    )


def closed_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed):
        sent = exc.sent
        if sent is not None and sent.code == 1009:
            return f"adapter sent an oversized message (limit {MAX_MESSAGE_BYTES} bytes)"
        received = exc.rcvd
        if received is None:
            return "adapter disconnected without a close frame"
        return f"adapter closed the connection (code {received.code} {received.reason})".strip()
    return f"{type(exc).__name__}: {exc}"

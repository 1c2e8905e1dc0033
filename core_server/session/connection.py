"""The WebSocket to an adapter: opening it, and naming why it was lost."""

from __future__ import annotations

import time
from http import HTTPStatus
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    InvalidURI,
)
from websockets.exceptions import ProtocolError as WebSocketProtocolError

from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.readiness import AdapterNotReady, wait_until_ready
from streameval.delivery import Delivering, ignore
from streameval.events import FailureCause
from streameval.fast_send import send_message, writable, write
from streameval.protocol import (
    AUDIO_FEATURE,
    FEATURES_HEADER,
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    PREFIX_SHARE_FEATURE,
    RESUME_FEATURE,
    WS_PATH,
)

# The optional features this Core reads, as its upgrade request announces them.
CORE_FEATURES = f"{RESUME_FEATURE},{PREFIX_SHARE_FEATURE},{AUDIO_FEATURE}"


class AdapterConnection(Delivering, ClientConnection):
    """A client connection that hands each adapter message to a callback as soon as it is
    parsed, with its arrival time, and tells another when it is gone (delivery.py): the
    session's receive side is a plain function run inside `data_received`."""

    async def cut(self) -> None:
        """Drop the connection as a network failure would: no close handshake, and
        nothing the adapter still sends is delivered (it is lost with the connection).
        Returns once the socket is closed."""
        self.deliver_to(ignore, ignore)
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
            additional_headers={FEATURES_HEADER: CORE_FEATURES},
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


def closed_failure(
    exc: BaseException, stage: FailureStage = FailureStage.STREAMING
) -> SessionFailure:
    """A lost connection: infrastructure, unless the adapter broke the protocol on the way
    (a WebSocket framing violation, an oversized message), which a rerun would repeat."""
    if isinstance(exc, ConnectionClosed):
        violation = framing_violation(exc)
        if violation is not None:
            reason = f"framing: adapter broke WebSocket framing (RFC 6455): {violation}"
            return SessionFailure(FailureStage.PROTOCOL, reason, FailureCause.ADAPTER)
        if _oversized(exc) or _refused_as_too_big(exc):
            return SessionFailure(stage, closed_reason(exc), FailureCause.ADAPTER)
    return SessionFailure(stage, closed_reason(exc), FailureCause.INFRASTRUCTURE)


def framing_violation(exc: ConnectionClosed) -> str | None:
    """What the adapter's bytes broke when the Core's WebSocket parser refused them
    (websockets closes with 1002, or 1007 for a close reason that is not UTF-8, and chains
    the parser's error), else None."""
    cause = exc.__cause__
    if isinstance(cause, WebSocketProtocolError):
        return str(cause)
    if isinstance(cause, UnicodeDecodeError) and exc.sent is not None:
        return f"close frame reason is not UTF-8 ({cause.reason} at position {cause.start})"
    return None


def _oversized(exc: ConnectionClosed) -> bool:
    """The Core closed the socket (1009) on an adapter message over the limit; an adapter
    closing it with 1009 first refused a Core message, which is not the adapter's message
    being too big."""
    sent = exc.sent
    return sent is not None and sent.code == 1009 and exc.rcvd_then_sent is not True


def _refused_as_too_big(exc: ConnectionClosed) -> bool:
    """The adapter closed the socket (1009) on a Core message: every one is within the
    protocol's limit (task texts are limited at load), so a rerun would repeat it."""
    return exc.rcvd is not None and exc.rcvd.code == 1009 and not _oversized(exc)


def closed_reason(exc: BaseException) -> str:
    if isinstance(exc, ConnectionClosed):
        if _oversized(exc):
            return f"adapter sent an oversized message (limit {MAX_MESSAGE_BYTES} bytes)"
        received = exc.rcvd
        if received is None:
            return "adapter disconnected without a close frame"
        if _refused_as_too_big(exc):
            return (
                "adapter refused a message of the Core as too big (code 1009); the protocol "
                f"allows {MAX_MESSAGE_BYTES} bytes"
            )
        return f"adapter closed the connection (code {received.code} {received.reason})".strip()
    return f"{type(exc).__name__}: {exc}"

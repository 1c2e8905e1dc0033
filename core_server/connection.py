"""The WebSocket to an adapter: opening it, and naming why it was lost."""

from __future__ import annotations

from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from streameval.core.failures import FailureStage, SessionFailure
from streameval.events import FailureCause
from streameval.protocol import (
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_TIMEOUT_S,
    MAX_MESSAGE_BYTES,
    WS_PATH,
)


async def connect_adapter(endpoint_url: str, timeout_s: float) -> ClientConnection:
    """Open a session's socket, or fail the session at stage `connect`."""
    try:
        return await connect(
            endpoint_url,
            compression=None,  # permessage-deflate stalls frame traffic (DESIGN.md)
            max_size=MAX_MESSAGE_BYTES,
            open_timeout=timeout_s,
            ping_interval=HEARTBEAT_INTERVAL_S,
            ping_timeout=HEARTBEAT_TIMEOUT_S,
            close_timeout=2,
        )
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        reason = f"cannot connect to {endpoint_url}: {exc or type(exc).__name__}"
        if not urlsplit(endpoint_url).path.endswith(WS_PATH):
            reason += f" (adapters serve sessions at {WS_PATH}: ws://HOST:PORT{WS_PATH})"
        raise SessionFailure(FailureStage.CONNECT, reason, FailureCause.INFRASTRUCTURE) from None


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

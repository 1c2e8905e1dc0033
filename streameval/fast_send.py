"""Sending a message on a `websockets` asyncio connection without `Connection.send`'s
per-message machinery, where nothing needs it."""

from __future__ import annotations

from websockets.asyncio.connection import Connection
from websockets.protocol import OPEN


def writable(connection: Connection) -> bool:
    """Whether a message can be written at once: the connection is open, its write buffer
    has room and no fragmented message is going out."""
    return (
        connection.protocol.state is OPEN
        and not connection.paused
        and connection.send_in_progress is None
        and not connection.transport.is_closing()
    )


def write(connection: Connection, message: str | bytes) -> None:
    """Write a message through the connection's protocol; only when `writable`."""
    if isinstance(message, str):
        connection.protocol.send_text(message.encode())
    else:
        connection.protocol.send_binary(message)
    connection.send_data()


async def send_message(connection: Connection, message: str | bytes) -> None:
    """`connection.send(message)`, written at once through the connection's protocol when
    it is `writable`. `send` wraps every message in an async context manager and a drain;
    at one message per frame each way that was a fifth of the time the Core and an adapter
    spend per frame. In every other case (closing, a full buffer) this is `send`, which
    waits or raises as always."""
    if writable(connection):
        write(connection, message)
    else:
        await connection.send(message)

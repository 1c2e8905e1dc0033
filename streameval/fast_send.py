"""Sending a message on a `websockets` asyncio connection without `Connection.send`'s
per-message machinery, where nothing needs it."""

from __future__ import annotations

import os
import struct

from websockets.asyncio.connection import Connection
from websockets.protocol import OPEN, Side

try:
    from websockets.speedups import apply_mask
except ImportError:  # websockets built without its C extension
    from websockets.utils import apply_mask

# RFC 6455 section 5.2: FIN with the binary opcode; the MASK bit on the length byte.
_FIN_BINARY = 0x82
_MASKED = 0x80


class MaskingKeys:
    """A client's masking keys, four bytes each, drawn from the operating system's random
    source a block at a time. websockets draws every key with its own `getrandom` system
    call (`secrets.token_bytes(4)`), a tenth of the Core's time per frame; the keys stay
    as unpredictable (RFC 6455 section 5.3: from a strong source of entropy)."""

    def __init__(self, block: int = 4096) -> None:
        self.block = block - block % 4
        self._keys = b""
        self._at = 0

    def next(self) -> bytes:
        at = self._at
        if at == len(self._keys):
            self._keys, at = os.urandom(self.block), 0
        self._at = at + 4
        return self._keys[at : at + 4]


_KEYS = MaskingKeys()


def binary_frame(data: bytes, key: bytes) -> bytes:
    """A whole binary message as one masked WebSocket frame (a client's), with `key`."""
    length = len(data)
    if length < 126:
        head = struct.pack("!BB", _FIN_BINARY, _MASKED | length)
    elif length < 65536:
        head = struct.pack("!BBH", _FIN_BINARY, _MASKED | 126, length)
    else:
        head = struct.pack("!BBQ", _FIN_BINARY, _MASKED | 127, length)
    return head + key + apply_mask(data, key)


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
    """Write a message through the connection's protocol; only when `writable`.

    A client's binary message (the Core's frames) is framed here, with a key from
    `MaskingKeys`, and written to the transport: what `protocol.send_binary` writes, less
    a frame object, a buffer and a copy. The protocol keeps no state of an unfragmented
    data frame it sends, and `writable` rules out a fragmented one in progress."""
    protocol = connection.protocol
    if isinstance(message, str):
        protocol.send_text(message.encode())
    elif protocol.side is Side.CLIENT:
        connection.transport.write(binary_frame(message, _KEYS.next()))
        return
    else:
        protocol.send_binary(message)
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

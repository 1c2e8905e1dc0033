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

# RFC 6455 section 5.2: FIN with the text or binary opcode and no reserved bits; the MASK
# bit on the length byte (fast_receive.py reads frames by the same bytes).
FIN_TEXT = 0x81
FIN_BINARY = 0x82
MASKED = 0x80


class MaskingKeys:
    """A client's masking keys, four bytes each, drawn from the operating system's random
    source a block at a time. websockets draws every key with its own `getrandom` system
    call (`secrets.token_bytes(4)`), 8% of the Core's event loop in a py-spy profile of the
    throughput benchmark. The keys stay as unpredictable (RFC 6455 section 5.3: from a
    strong source of entropy)."""

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


def data_frame(data: bytes, *, text: bool, key: bytes | None) -> bytes:
    """A whole message as one WebSocket frame: text (UTF-8 `data`) or binary, masked with
    `key` (a client's frames) or not (a server's)."""
    head1 = FIN_TEXT if text else FIN_BINARY
    mask = 0 if key is None else MASKED
    length = len(data)
    if length < 126:
        head = struct.pack("!BB", head1, mask | length)
    elif length < 65536:
        head = struct.pack("!BBH", head1, mask | 126, length)
    else:
        head = struct.pack("!BBQ", head1, mask | 127, length)
    if key is None:
        return head + data
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
    """Write a message to the connection's transport at once; only when `writable`.

    The message is framed here (`data_frame`, with a key from `MaskingKeys` on a client):
    the bytes `protocol.send_text` / `send_binary` would write, less a frame object, a
    buffer, a copy and a pass through the protocol's output queue. The protocol keeps no
    state of an unfragmented data frame it sends, and `writable` rules out a fragmented
    one in progress."""
    text = isinstance(message, str)
    data = message.encode() if text else message
    key = _KEYS.next() if connection.protocol.side is Side.CLIENT else None
    connection.transport.write(data_frame(data, text=text, key=key))


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

"""A `websockets` asyncio connection that hands each message to a callback as soon as its
last frame is parsed, instead of queueing it for `recv()`.

Both ends of a session use it: the Core's connection to an adapter and the SDK's connection
to the Core. With `recv()` every message cost a queue, a future and a task waking up in the
next turn of the event loop (a third of the Core's cost per frame); here the receiving side
is a plain function run inside `data_received`, and a whole data frame does not even pass
through websockets' parser (fast_receive.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NoReturn

from websockets.asyncio.connection import Connection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode, Frame, Opcode
from websockets.protocol import CLOSED, OPEN, Event, Side

from streameval.fast_receive import FrameReader

# The other end's messages are JSON objects and frames; thousands of fragments are an
# attack on the receiver's memory (each fragment is an object), not a message.
MAX_FRAGMENTS = 1024

# What a message arrives as: text as `str`, binary as `bytes`, and a text message that is
# not UTF-8 as the UnicodeDecodeError.
Arrival = str | bytes | UnicodeDecodeError


class Delivering(Connection):
    """Hands each message, with its arrival time (`time.monotonic_ns()`), to the callback
    given to `deliver_to`, and the connection's end to another. What arrives before
    `deliver_to` (a message may come with the handshake) is held and handed over then.
    `recv()` is not used on it: it would wait for messages that never reach its queue."""

    _on_message: Callable[[Arrival, int], None] | None = None
    _on_closed: Callable[[ConnectionClosed], None] | None = None
    _held: list[tuple[Arrival, int]] | None = None
    _fragments: list[Frame] | None = None
    _refused = False  # a message was refused and the connection is closing
    _reader: FrameReader | None = None

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

    async def recv(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise TypeError("this connection hands each message to deliver_to's callback")

    def process_event(self, event: Event) -> None:
        if not isinstance(event, Frame):  # the handshake's request or response
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

    # The connection's bytes go through a FrameReader (fast_receive.py), which gives
    # websockets everything but whole data frames.

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        if reader is None:
            protocol = self.protocol
            limits = [protocol.max_message_size, protocol.max_fragment_size]
            reader = self._reader = FrameReader(
                self,
                masked=protocol.side is Side.SERVER,
                limit=min((size for size in limits if size is not None), default=None),
            )
        reader.feed(data)

    def eof_received(self) -> None:
        if self._reader is not None:
            self._reader.flush()
        super().eof_received()

    def pass_on(self, data: bytes) -> None:
        super().data_received(data)

    def frames_follow(self) -> bool:
        # A server's parser reads frames right after the request's head; a client's only
        # once the response accepted the connection.
        return self.protocol.side is Side.SERVER or self.protocol.state is OPEN

    def takes_messages(self) -> bool:
        protocol = self.protocol
        return (
            protocol.state is OPEN
            and protocol.current_size is None
            and not protocol.extensions
            and self._fragments is None
            and not self._refused
        )

    def message(self, data: bytes, text: bool) -> None:
        arrived = time.monotonic_ns()
        self._deliver(_decoded(Opcode.TEXT if text else Opcode.BINARY, data), arrived)

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


def ignore(*_args: object) -> None:
    """A callback for messages and a close that nobody reads any more."""


def _decoded(opcode: Opcode, data: bytes | bytearray | memoryview) -> Arrival:
    if opcode is Opcode.BINARY:
        return bytes(data)
    try:
        return bytes(data).decode()
    except UnicodeDecodeError as exc:
        return exc

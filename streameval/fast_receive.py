"""Reading the other end's whole data frames without `websockets`' per-frame parser, where
nothing needs it (the receiving twin of fast_send.py).

websockets parses every incoming frame with a chain of generators over a byte buffer: a
copy of each frame into the buffer, another out of it, and a dozen generator steps. At one
message per frame each way that was 9% of the Core's event loop and 17% of an adapter's in
py-spy profiles of the throughput benchmark. `FrameReader` splits the stream itself and
hands a data frame that websockets would turn into one whole message (FIN set, no reserved
bits, masked exactly when a client sent it, within the size limit, on an open connection
with no fragmented message going on) straight to the connection's `message`. Everything
else, byte for byte and whole, goes to websockets' own parser (`pass_on`): the opening
handshake's head, control frames (ping, pong, close), fragments, frames on a connection
that is not open, and frames websockets must refuse (bad opcode, bad masking), which it
refuses as always. Since websockets is only ever given whole frames after the head, its
parser stays at a frame boundary and can take over at any point. A frame over the limit
hands the whole rest of the stream over for good, so websockets refuses it from its header
(close code 1009) without either side holding its payload.
"""

from __future__ import annotations

from typing import Protocol

from streameval.fast_send import FIN_BINARY, FIN_TEXT, MASKED, apply_mask

_HEAD_END = b"\r\n\r\n"
# websockets refuses a head past its own line and header limits; past this much without
# an end, the reader stops looking and lets websockets say so.
MAX_HEAD_BYTES = 65536


class Reading(Protocol):
    """What a `FrameReader` feeds (delivery.Delivering)."""

    def pass_on(self, data: bytes) -> None:
        """Give bytes to websockets' own parser (its `data_received`)."""

    def frames_follow(self) -> bool:
        """After the head: whether frames come next (not an HTTP body, say after a client
        was refused), so that websockets' parser is at a frame boundary."""

    def takes_messages(self) -> bool:
        """Whether a whole data frame may be delivered without websockets now."""

    def message(self, data: bytes, text: bool) -> None:
        """A whole text or binary message (`data` unmasked)."""


class FrameReader:
    """Splits one connection's incoming bytes: the handshake's head and every frame but a
    plain data frame go to websockets; plain data frames go to `message`.

    `masked`: whether the other end is a client (its frames must be masked). `limit`: the
    largest payload websockets accepts (its `max_size`), or None."""

    def __init__(self, connection: Reading, *, masked: bool, limit: int | None) -> None:
        self.connection = connection
        self.masked = masked
        self.limit = limit
        self.head_read = False
        self.handed_over = False  # websockets reads the rest of the stream itself
        self._held = bytearray()  # an incomplete head or frame
        self._wanted = 0  # bytes `_held` needs before it is worth parsing again

    def feed(self, data: bytes) -> None:
        if self.handed_over:
            self.connection.pass_on(data)
            return
        if self._held:
            self._held += data
            if len(self._held) < self._wanted:
                return
            data = bytes(self._held)
            self._held.clear()
        if not self.head_read:
            data = self._read_head(data)
            if not data:
                return
        self._read_frames(data)

    def flush(self) -> None:
        """Give websockets what is held (at the end of the stream, which it then judges:
        an incomplete head or frame is its error, as if it had read the bytes itself)."""
        held = bytes(self._held)
        self._held.clear()
        self.handed_over = True
        if held:
            self.connection.pass_on(held)

    def _read_head(self, data: bytes) -> bytes:
        """Pass the handshake's head on; returns the frames' bytes after it (empty when
        there are none yet or websockets reads the rest itself)."""
        end = data.find(_HEAD_END)
        if end < 0:
            if len(data) > MAX_HEAD_BYTES:
                self._hand_over(data)
            else:
                self._hold(data, len(data) + 1)
            return b""
        end += len(_HEAD_END)
        self.head_read = True
        self.connection.pass_on(data[:end])
        rest = data[end:]
        if not self.connection.frames_follow():
            self._hand_over(rest)
            return b""
        return rest

    def _read_frames(self, data: bytes) -> None:
        connection = self.connection
        masked, limit = self.masked, self.limit
        size = len(data)
        at = 0
        while at < size:
            # Bytes the frame at `at` needs before it can be read, as far as known so far.
            wanted = at + 2
            if size < wanted:
                break
            first, second = data[at], data[at + 1]
            length = second & 0x7F
            if length >= 126:
                wanted += 2 if length == 126 else 8
                if size < wanted:
                    break
                length = int.from_bytes(data[at + 2 : wanted])
            if limit is not None and length > limit:
                self._hand_over(data[at:])
                return
            key_at = wanted
            if second & MASKED:
                wanted += 4
            start, wanted = wanted, wanted + length
            if size < wanted:
                break
            plain = first in (FIN_BINARY, FIN_TEXT) and (bool(second & MASKED) is masked)
            if plain and connection.takes_messages():
                payload = data[start:wanted]
                if masked:
                    payload = apply_mask(payload, data[key_at:start])
                connection.message(payload, first == FIN_TEXT)
            else:
                connection.pass_on(data[at:wanted])
            at = wanted
        if at < size:  # the loop stopped on an incomplete frame
            self._hold(data[at:], wanted - at)

    def _hold(self, rest: bytes, wanted: int) -> None:
        self._held += rest
        self._wanted = wanted

    def _hand_over(self, rest: bytes) -> None:
        self.handed_over = True
        if rest:
            self.connection.pass_on(rest)

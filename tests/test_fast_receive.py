"""Whole data frames read without websockets' parser (streameval/fast_receive.py).

The `FrameReader` tests feed it frames that websockets itself serialised and check what it
hands on: each plain data frame as a message, everything else byte for byte to websockets,
however the bytes are cut. The connection tests run both ends of a session's socket (the
SDK's `CoreConnection`, the Core's `AdapterConnection`) against plain websockets peers and
raw TCP peers on real sockets.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.frames import Frame, Opcode
from websockets.utils import accept_key

from streameval.adapters.server import CoreConnection
from streameval.core.session.connection import AdapterConnection
from streameval.delivery import Arrival
from streameval.fast_receive import MAX_HEAD_BYTES, FrameReader
from tests.test_send_path import framed_messages

HEAD = b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n"


class Sink:
    """What a FrameReader hands on, in order: ("ws", bytes) or ("message", data, text)."""

    def __init__(self, *, open_: bool = True, frames_follow: bool = True) -> None:
        self.open = open_
        self.follow = frames_follow
        self.log: list[tuple] = []

    def pass_on(self, data: bytes) -> None:
        if self.log and self.log[-1][0] == "ws":  # cuts in what websockets reads don't matter
            self.log[-1] = ("ws", self.log[-1][1] + bytes(data))
        else:
            self.log.append(("ws", bytes(data)))

    def frames_follow(self) -> bool:
        return self.follow

    def takes_messages(self) -> bool:
        return self.open

    def message(self, data: bytes, text: bool) -> None:
        self.log.append(("message", bytes(data), text))


def wire(opcode: Opcode, data: bytes, *, masked: bool, fin: bool = True) -> bytes:
    return Frame(opcode, data, fin).serialize(mask=masked)


def read(
    chunks: list[bytes], *, masked: bool = True, limit: int | None = None, sink: Sink | None = None
) -> list[tuple]:
    sink = sink or Sink()
    reader = FrameReader(sink, masked=masked, limit=limit)
    for chunk in chunks:
        reader.feed(chunk)
    return sink.log


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[k : k + size] for k in range(0, len(data), size)]


@pytest.mark.parametrize("masked", [True, False], ids=["from a client", "from a server"])
@pytest.mark.parametrize("size", [1, 2, 7, 4096, None], ids=lambda s: f"cut {s}")
def test_data_frames_of_every_length_class_are_messages_however_the_bytes_are_cut(masked, size):
    messages = framed_messages()
    stream = HEAD + b"".join(
        wire(Opcode.TEXT if isinstance(m, str) else Opcode.BINARY, _bytes(m), masked=masked)
        for m in messages
    )
    log = read(cut(stream, size) if size else [stream], masked=masked)
    assert log == [("ws", HEAD)] + [("message", _bytes(m), isinstance(m, str)) for m in messages]


def test_control_frames_and_fragments_go_to_websockets_whole_and_in_order():
    ping = wire(Opcode.PING, b"p", masked=True)
    first = wire(Opcode.TEXT, b"frag", masked=True, fin=False)
    last = wire(Opcode.CONT, b"ment", masked=True)
    close = wire(Opcode.CLOSE, b"\x03\xe8", masked=True)
    hello = wire(Opcode.TEXT, b"hello", masked=True)
    for size in (1, 3, None):
        stream = HEAD + ping + hello + first + last + close
        log = read(cut(stream, size) if size else [stream])
        assert log == [
            ("ws", HEAD + ping),
            ("message", b"hello", True),
            ("ws", first + last + close),
        ]


def test_frames_the_connection_does_not_take_now_go_to_websockets_whole():
    frame = wire(Opcode.BINARY, b"\x00" * 300, masked=True)
    assert read([HEAD + frame + frame], sink=Sink(open_=False)) == [("ws", HEAD + frame + frame)]


@pytest.mark.parametrize("masked", [True, False])
def test_a_frame_masked_as_the_other_side_would_is_left_to_websockets(masked):
    """websockets refuses it (a protocol error); the reader must not deliver it."""
    wrong = wire(Opcode.TEXT, b"x", masked=not masked)
    assert read([HEAD + wrong], masked=masked) == [("ws", HEAD + wrong)]


def test_a_frame_over_the_limit_hands_the_rest_of_the_stream_over_from_its_header():
    """websockets refuses it (close code 1009) from its header: nobody holds its payload."""
    sink = Sink()
    reader = FrameReader(sink, masked=True, limit=100)
    small = wire(Opcode.TEXT, b"ok", masked=True)
    big = wire(Opcode.BINARY, b"\x01" * 101, masked=True)
    reader.feed(HEAD + small + big[:8])  # the header and mask key, no payload yet
    assert sink.log == [("ws", HEAD), ("message", b"ok", True), ("ws", big[:8])]
    reader.feed(big[8:] + small)  # from then on every byte goes straight to websockets
    assert sink.log[-1] == ("ws", big + small)
    assert reader.handed_over


def test_after_a_head_that_frames_do_not_follow_everything_goes_to_websockets():
    """A client refused with a body (a 503 while the adapter loads): the body is HTTP."""
    response = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 7\r\n\r\n"
    body = b"\x81\x05later"  # a body that would parse as a frame
    log = read([response + body[:3], body[3:]], masked=False, sink=Sink(frames_follow=False))
    assert log == [("ws", response + body)]


def test_what_is_held_at_the_end_of_the_stream_goes_to_websockets():
    sink = Sink()
    reader = FrameReader(sink, masked=True, limit=None)
    frame = wire(Opcode.BINARY, b"\x02" * 50, masked=True)
    reader.feed(HEAD + frame[:20])
    assert sink.log == [("ws", HEAD)]
    reader.flush()
    assert sink.log == [("ws", HEAD + frame[:20])]


def test_a_head_that_never_ends_is_left_to_websockets():
    log = read([b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * (MAX_HEAD_BYTES // 6)])
    assert len(log) == 1 and log[0][0] == "ws" and len(log[0][1]) > MAX_HEAD_BYTES


def _bytes(message: str | bytes) -> bytes:
    return message.encode() if isinstance(message, str) else message


# ---------------------------------------------------------------- on real sockets


async def test_an_adapters_connection_reads_a_plain_clients_messages_pings_and_close():
    """Every kind and size of message, a fragmented one, a ping answered, a clean close."""
    messages = framed_messages()
    received: list[Arrival] = []
    closed: asyncio.Future[ConnectionClosed] = asyncio.get_running_loop().create_future()

    async def handler(ws: CoreConnection) -> None:
        ws.deliver_to(lambda raw, _ns: received.append(raw), closed.set_result)
        await ws.wait_closed()

    async with serve(
        handler, "127.0.0.1", 0, create_connection=CoreConnection, compression=None
    ) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None) as client:
            for message in messages:
                await client.send(message)
            await client.send(["frag", "mented"])
            await asyncio.wait_for(await client.ping(b"are you there"), 5)
        outcome = await asyncio.wait_for(closed, 5)
    assert received == [*messages, "fragmented"]
    assert outcome.rcvd is not None and outcome.rcvd.code == 1000


async def test_a_message_over_the_limit_closes_the_connection_with_1009():
    received: list[Arrival] = []

    async def handler(ws: CoreConnection) -> None:
        ws.deliver_to(lambda raw, _ns: received.append(raw), lambda _exc: None)
        await ws.wait_closed()

    async with serve(
        handler, "127.0.0.1", 0, create_connection=CoreConnection, max_size=1000
    ) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None) as client:
            await client.send("small")
            await client.send(b"\x00" * 1001)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(client.recv(), 5)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    assert received == ["small"]


async def raw_server(reply: bytes | None) -> tuple[asyncio.Server, int]:
    """A TCP server that answers a WebSocket request with `reply` (None: a 101 accepting
    it) followed by two frames, all in one write, so they arrive together."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip().decode()
            for line in request.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n"
        ).encode()
        frames = wire(Opcode.TEXT, b'{"type":"hello"}', masked=False) + wire(
            Opcode.BINARY, os.urandom(20_000), masked=False
        )
        writer.write((accept if reply is None else reply) + frames)
        await writer.drain()
        await reader.read()  # until the client goes
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_the_cores_connection_reads_messages_that_came_with_the_handshake():
    server, port = await raw_server(None)
    received: list[Arrival] = []
    async with server:
        client = await connect(f"ws://127.0.0.1:{port}", create_connection=AdapterConnection)
        client.deliver_to(lambda raw, _ns: received.append(raw), lambda _exc: None)
        for _ in range(50):
            if len(received) == 2:
                break
            await asyncio.sleep(0.02)
        client.transport.abort()
    assert received[0] == '{"type":"hello"}'
    assert isinstance(received[1], bytes) and len(received[1]) == 20_000


async def test_a_refusal_and_its_body_reach_the_core_as_they_were_sent():
    body = b"\x81\x0cnot ready..."  # starts like a frame; it is the refusal's text
    refusal = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n" % len(body)
    server, port = await raw_server(refusal + body)
    async with server:
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"ws://127.0.0.1:{port}", create_connection=AdapterConnection)
    assert refused.value.response.status_code == 503
    assert refused.value.response.body == body

"""An adapter that speaks HTTP and WebSocket by hand, to commit what no WebSocket library
would let it: `python -m tests.raw_ws_adapter BEHAVIOUR` serves `/healthz`, `/info` (an
`InstantAdapter`'s) and `/ws`; on `/ws` it sends a hello, reads the Core's session_start
and then does BEHAVIOUR: one of `AFTER_START` (raw bytes that break RFC 6455, or a close),
or a hello of its own (`HELLOS`) in place of the honest one. Each upgrade is counted in
$STREAMEVAL_TEST_LOG/connections (one line each), so a test sees every retry.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import sys

from streameval.adapters.__main__ import READY_PREFIX
from streameval.protocol import PROTOCOL_VERSION, AdapterConditions, Hello
from tests.wire_adapters import InstantAdapter

_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_CLOSE = 0x8

# What a server-side peer can break (RFC 6455 section 5), as the bytes it sends, with what
# the Core's WebSocket parser says about them.
VIOLATIONS: dict[str, tuple[bytes, str]] = {
    # 5.1: a server MUST NOT mask the frames it sends.
    "masked": (b"\x81\x82abcd" + bytes([ord("{") ^ 0x61, ord("}") ^ 0x62]), "incorrect masking"),
    # 5.2: reserved bits are 0 unless an extension was negotiated (none is).
    "rsv1": (b"\xc1\x02{}", "reserved bits must be 0"),
    "rsv3": (b"\x91\x02{}", "reserved bits must be 0"),
    # 5.2: opcodes 0x3-0x7 and 0xB-0xF are reserved.
    "opcode": (b"\x83\x00", "invalid opcode"),
    # 5.5: control frames carry at most 125 bytes and are never fragmented.
    "long_ping": (b"\x89\x7e\x00\x7e" + b"x" * 126, "control frame too long"),
    "fragmented_ping": (b"\x09\x00", "fragmented control frame"),
    # 5.4: a continuation needs a message to continue; a new message needs the last ended.
    "stray_continuation": (b"\x80\x02{}", "unexpected continuation frame"),
    "interleaved": (b"\x01\x01{" + b"\x81\x01}", "expected a continuation frame"),
    "close_mid_message": (b"\x01\x01{" + b"\x88\x02\x03\xe8", "incomplete fragmented message"),
    # 5.5.1 and 7.4: a close body is empty or a valid code, then UTF-8.
    "short_close": (b"\x88\x01\x03", "close frame too short"),
    "close_code": (b"\x88\x02\x03\xe7", "invalid status code"),
    "close_reason": (
        b"\x88\x04\x03\xe8\xff\xfe",
        "close frame reason is not UTF-8 (invalid start byte at position 0)",
    ),
}


# What the adapter sends after session_start: a violation, or a valid close with code 1009
# ("message too big") that an adapter would send on a Core message over its own limit.
AFTER_START: dict[str, bytes] = {
    **{name: sent for name, (sent, _) in VIOLATIONS.items()},
    "refuses_as_too_big": b"\x88\x02\x03\xf1",
}


def _conditions(**changes: object) -> AdapterConditions:
    return InstantAdapter.conditions.model_copy(update=changes)


def _hello(**changes: object) -> bytes:
    adapter = InstantAdapter()
    hello = Hello(
        adapter=adapter.name, adapter_version=adapter.version, conditions=adapter.conditions
    )
    return hello.model_copy(update=changes).model_dump_json().encode()


# Hellos in place of the honest one, sent before session_start.
HELLOS: dict[str, bytes] = {
    "impostor": _hello(adapter="someone-else"),
    "other_version": _hello(adapter_version="9.9"),
    # 7 MB of settings: stored with every session, were it accepted.
    "huge_settings": _hello(conditions=_conditions(settings={"prompt": "x" * 7_000_000})),
}


def _frame(payload: bytes, opcode: int = 0x1) -> bytes:
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + size.to_bytes(2)
    else:
        head = bytes([0x80 | opcode, 127]) + size.to_bytes(8)
    return head + payload


async def _read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One frame from the Core (a client: masked), as (opcode, unmasked payload)."""
    first, second = await reader.readexactly(2)
    size = second & 0x7F
    if size >= 126:
        size = int.from_bytes(await reader.readexactly(2 if size == 126 else 8))
    key = await reader.readexactly(4)
    payload = await reader.readexactly(size)
    return first & 0x0F, bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def _respond(writer: asyncio.StreamWriter, status: str, body: bytes, kind: str) -> None:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
    writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)


async def _session(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: str, behaviour: str
) -> None:
    with open(os.path.join(os.environ["STREAMEVAL_TEST_LOG"], "connections"), "a") as log:
        log.write(behaviour + "\n")
    accept = base64.b64encode(hashlib.sha1(key.encode() + _WS_GUID).digest()).decode()
    writer.write(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode()
    )
    writer.write(_frame(HELLOS.get(behaviour) or _hello()))
    await _read_frame(reader)  # session_start
    if behaviour in AFTER_START:
        writer.write(AFTER_START[behaviour])
    # Until the Core closes: its close frame is answered by closing the socket.
    while (await _read_frame(reader))[0] != _CLOSE:
        pass


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, behaviour: str):
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ", 2)[1]
        headers = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(":") for line in head.split("\r\n")[1:])
        )
        if path == "/healthz":
            _respond(writer, "200 OK", b"ok\n", "text/plain")
        elif path == "/info":
            info = {**InstantAdapter().info(), "protocol": PROTOCOL_VERSION}
            _respond(writer, "200 OK", json.dumps(info).encode(), "application/json")
        else:
            await _session(reader, writer, headers["sec-websocket-key"], behaviour)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(behaviour: str) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, behaviour), host="127.0.0.1", port=0
    )
    port = server.sockets[0].getsockname()[1]
    print(f"{READY_PREFIX} ws://127.0.0.1:{port}/ws", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))

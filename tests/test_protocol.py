"""The wire protocol's parsing rules, and the adapter SDK's side of the state machine."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.client import connect

from streameval.adapters.baselines import AlwaysAdapter
from streameval.adapters.server import serve
from streameval.protocol import (
    FrameAck,
    FrameHeader,
    ProtocolViolation,
    RunConditions,
    SessionStart,
    decode_frame,
    encode_frame,
    frame_ack_index,
    parse_adapter_message,
)

CONDITIONS = RunConditions(
    profile="trace",
    pacing="logical",
    fps=1,
    max_width=960,
    jpeg_quality=90,
    qa_history_s=10,
    proactive_lead_s=5,
)


@pytest.mark.parametrize(
    ("raw", "code", "detail"),
    [
        ("{not json", "malformed", "Invalid JSON"),
        ('{"type": "teleport"}', "malformed", "does not match any of the expected tags"),
        ('{"type": "frame_ack"}', "malformed", "frame_ack.index: Field required"),
        ('{"type": "frame_ack", "index": "x"}', "malformed", "frame_ack.index"),
        ('{"type": "frame_ack", "index": 1, "extra": 2}', "malformed", "Extra inputs"),
        (
            '{"type": "response_delta", "response_id": "r", "seq": 0, "text": "'
            + "x" * 200_001
            + '"}',
            "malformed",
            "at most 200000 characters",
        ),
        (b"\x00\x01", "unexpected_binary", "binary message"),
    ],
)
def test_malformed_adapter_messages_are_named(raw, code, detail):
    with pytest.raises(ProtocolViolation) as caught:
        parse_adapter_message(raw)
    assert caught.value.code == code
    assert detail in caught.value.message


def test_a_valid_message_parses_to_its_model():
    message = parse_adapter_message('{"type": "silent", "task_id": "q1", "step": 3}')
    assert (message.type, message.task_id, message.step) == ("silent", "q1", 3)


@pytest.mark.parametrize("index", [0, 7, 599, 10**17])
def test_a_canonical_frame_ack_is_read_as_the_parser_reads_it(index):
    raw = FrameAck(index=index).model_dump_json()  # the SDK's form, byte for byte
    assert raw == f'{{"type":"frame_ack","index":{index}}}'
    assert frame_ack_index(raw) == parse_adapter_message(raw).index == index


@pytest.mark.parametrize(
    "raw",
    [
        '{"type": "frame_ack", "index": 3}',  # spaced
        '{"index":3,"type":"frame_ack"}',  # reordered
        '{"type":"frame_ack","index":03}',  # not JSON
        '{"type":"frame_ack","index":-3}',
        '{"type":"frame_ack","index":3.0}',
        '{"type":"frame_ack","index":3,"extra":1}',
        '{"type":"frame_ack","index":3}\n',
        '{"type":"frame_ack","index":1234567890123456789012}',
        b'{"type":"frame_ack","index":3}',  # binary: a violation, for the parser to name
        '{"type":"silent","task_id":"q1"}',
    ],
)
def test_any_other_message_is_left_to_the_parser(raw):
    assert frame_ack_index(raw) is None


def test_frames_round_trip_and_bad_frames_are_refused():
    header = FrameHeader(index=7, frame_id="abc:210", t=7.0, width=4, height=2, nbytes=3)
    decoded_header, payload = decode_frame(encode_frame(header, b"jpg"))
    assert (decoded_header, payload) == (header, b"jpg")
    with pytest.raises(ProtocolViolation, match="payload size differs"):
        decode_frame(encode_frame(header, b"jpeg!"))
    with pytest.raises(ProtocolViolation, match="shorter than its header"):
        decode_frame(b"\x00")


async def _adapter_server():
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(AlwaysAdapter(), port=0, ready=ready.set_result))
    return task, await ready


async def test_sdk_says_hello_then_refuses_out_of_order_messages():
    task, port = await _adapter_server()
    try:
        async with connect(f"ws://127.0.0.1:{port}/ws", compression=None) as ws:
            hello = json.loads(await ws.recv())
            assert hello["type"] == "hello" and hello["adapter"] == "always"
            await ws.send(
                json.dumps(
                    {"type": "question", "task_id": "q", "t": 1.0, "text": "?", "options": ["A. x"]}
                )
            )
            error = json.loads(await ws.recv())
            assert error == {
                "type": "protocol_error",
                "code": "out_of_order",
                "message": "question before session_start",
            }
    finally:
        task.cancel()


async def test_sdk_answers_a_full_session():
    task, port = await _adapter_server()
    try:
        async with connect(f"ws://127.0.0.1:{port}/ws", compression=None) as ws:
            await ws.recv()  # hello
            start = SessionStart(
                run_id="r", session_id="s", record_ids=["q"], conditions=CONDITIONS
            )
            await ws.send(start.model_dump_json())
            header = FrameHeader(index=0, frame_id="v:0", t=0.0, width=1, height=1, nbytes=1)
            await ws.send(encode_frame(header, b"x"))
            assert json.loads(await ws.recv()) == {"type": "frame_ack", "index": 0}
            await ws.send(
                json.dumps(
                    {
                        "type": "question",
                        "task_id": "q",
                        "t": 0.0,
                        "text": "?",
                        "options": ["C. x", "D. y"],
                    }
                )
            )
            kinds = []
            while not kinds or kinds[-1]["type"] != "response_final":
                kinds.append(json.loads(await ws.recv()))
            assert [k["type"] for k in kinds] == [
                "response_start",
                "response_delta",
                "response_final",
            ]
            assert kinds[-1]["text"] == "C"
            await ws.send(json.dumps({"type": "session_end", "reason": "complete"}))
            assert json.loads(await ws.recv()) == {"type": "session_closed"}
    finally:
        task.cancel()

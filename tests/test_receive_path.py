"""The Core's receive side: adapter messages handled inside the connection's data_received.

Each test plays one QA session (a question, no frames) through the real `SessionDriver`
against a WebSocket server on a real socket that behaves on the wire in one precise way:
fragmented messages, a text message that is not UTF-8, a message cut into too many
fragments, a message sent before session_start.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import pytest
from websockets.asyncio.server import ServerConnection, serve

from streameval.core.config import PROTOCOL_PROFILES
from streameval.core.session.driver import SessionDriver, SessionOutcome
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import Timeline, TimelineItem
from streameval.delivery import MAX_FRAGMENTS
from streameval.events import Event, EventKind
from streameval.protocol import MAX_MESSAGE_BYTES, WS_PATH, AdapterConditions, Hello
from tests.recording import reading_into
from tests.test_pacing import QA
from tests.test_protocol import CONDITIONS

HELLO = Hello(
    adapter="wire", conditions=AdapterConditions(state="native", initiation="query", model_name="m")
).model_dump_json()
START = '{"type":"response_start","response_id":"r1","task_id":"q1"}'
FINAL = '{"type":"response_final","response_id":"r1","text":"A"}'

Script = Callable[[ServerConnection], Awaitable[None]]


async def play(script: Script) -> tuple[SessionOutcome, list[Event]]:
    """One session of the Core against a server running `script` after its hello."""

    async def handler(ws: ServerConnection) -> None:
        await ws.send(HELLO)
        await script(ws)

    async with serve(handler, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        timeline = Timeline(QA.record_id, "qa", (TimelineItem("question", 1.0),))
        plan = SessionPlan("run", QA.record_id, QA, timeline, None)  # type: ignore[arg-type]
        events: list[Event] = []
        driver = SessionDriver(
            plan,
            endpoint_url=f"ws://127.0.0.1:{port}{WS_PATH}",
            conditions=CONDITIONS,
            profile=PROTOCOL_PROFILES["trace"],
            response_timeout_s=5.0,
            connect_timeout_s=5.0,
            sink=reading_into(events),
        )
        return await driver.run(), events


async def answer_and_close(ws: ServerConnection, *answer: str | list[str]) -> None:
    """Read session_start and the question, send `answer`, close on session_end."""
    assert json.loads(await ws.recv())["type"] == "session_start"
    assert json.loads(await ws.recv())["type"] == "question"
    for message in answer:
        await ws.send(message)
    assert json.loads(await ws.recv())["type"] == "session_end"
    await ws.send('{"type":"session_closed"}')


def kinds(events: list[Event]) -> list[str]:
    return [event.kind.value for event in events]


async def test_a_fragmented_message_is_assembled_and_handled() -> None:
    def fragments(text: str) -> list[str]:
        return [text[k : k + 7] for k in range(0, len(text), 7)]

    outcome, events = await play(
        lambda ws: answer_and_close(ws, fragments(START), fragments(FINAL))
    )
    assert outcome.status == "finished"
    final = [e for e in events if e.kind == EventKind.RESPONSE_FINAL]
    assert [e.payload.text for e in final] == ["A"]  # type: ignore[attr-defined]


async def test_a_text_message_that_is_not_utf8_is_a_protocol_violation() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.recv()  # session_start
        await ws.recv()  # question
        await ws.send(b'{"type":"silent","task_id":"\xff"}', text=True)
        await ws.wait_closed()

    outcome, events = await play(script)
    assert (outcome.status, outcome.stage, outcome.cause) == ("failed", "protocol", "adapter")
    assert outcome.reason == (
        "malformed: text message is not UTF-8: invalid start byte at position 28"
    )
    assert kinds(events)[-1] == "session_failed"


async def test_a_message_in_too_many_fragments_fails_the_session_as_oversized() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.recv()
        await ws.recv()
        await ws.send(["x"] * (MAX_FRAGMENTS + 1))
        await ws.wait_closed()

    outcome, _ = await play(script)
    assert (outcome.status, outcome.stage, outcome.cause) == ("failed", "streaming", "adapter")
    assert outcome.reason == f"adapter sent an oversized message (limit {MAX_MESSAGE_BYTES} bytes)"


async def test_a_message_sent_before_session_start_is_recorded_after_it() -> None:
    """The receive side holds what follows the hello until session_start is sent, as the
    socket's queue did: the record keeps the Core's order of what it saw."""
    workload = '{"type":"workload","kind":"state_commit","images":1}'

    async def script(ws: ServerConnection) -> None:
        await ws.send(workload)
        await answer_and_close(ws, START, FINAL)

    outcome, events = await play(script)
    assert outcome.status == "finished"
    assert kinds(events)[:3] == ["adapter_hello", "session_start", "workload"]


@pytest.mark.parametrize(
    "ack",
    [
        '{"type":"frame_ack","index":4}',  # as the SDK writes it: read without the parser
        '{"type": "frame_ack", "index": 4}',  # spaced: parsed
    ],
)
async def test_an_ack_for_a_frame_never_sent_fails_the_session_however_it_is_written(ack) -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.recv()  # session_start
        await ws.recv()  # question
        await ws.send(ack)
        await ws.wait_closed()

    outcome, events = await play(script)
    assert (outcome.status, outcome.stage, outcome.cause) == ("failed", "protocol", "adapter")
    assert outcome.reason == "out_of_order: ack for unsent frame 4"
    assert "frame_ack" not in kinds(events)

"""The Core's protocol state machine, message by message, without a socket.

Each test tells `ProtocolState` what the Core sent, hands it parsed adapter messages and
checks the `Reaction`: what is recorded (kind and exact payload), what it resolves, and the
violation (code + message) or failure (stage, reason, cause) it reports.
"""

from __future__ import annotations

import pytest

from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.protocol_state import (
    Awaited,
    ProtocolState,
    Reaction,
    Record,
    Resolution,
    ResponseLimits,
    hello_payload,
)
from streameval.events import EventKind
from streameval.protocol import (
    PROTOCOL_VERSION,
    AdapterConditions,
    AdapterError,
    FrameAck,
    Hello,
    ProtocolError,
    ResponseDelta,
    ResponseFinal,
    ResponseStart,
    SessionClosed,
    Silent,
    Workload,
)

CONDITIONS = AdapterConditions(state="native", initiation="polled", model_name="m")
HELLO = Hello(adapter="a", adapter_version="1.2", conditions=CONDITIONS)
T = 5.0  # the video time every message below arrives at
NS = 1_000  # ... and its arrival runtime


def accept(state: ProtocolState, message, arrived_ns: int = NS) -> Reaction:
    return state.accept(message, arrived_ns, T)


def greeted(*tasks: str, frames: tuple[int, ...] = ()) -> ProtocolState:
    """A state past the hello that has sent `frames` and asked `tasks`."""
    state = ProtocolState()
    assert accept(state, HELLO).violation is None
    for index in frames:
        state.frame_sent(index)
    for task in tasks:
        state.task_sent(task)
    return state


def opened(response_id: str = "r1", task_id: str = "q") -> ProtocolState:
    state = greeted(task_id)
    assert accept(state, ResponseStart(response_id=response_id, task_id=task_id)).violation is None
    return state


def violation(reaction: Reaction) -> tuple[str, str]:
    assert reaction.violation is not None, reaction
    assert (reaction.record, reaction.resolves, reaction.failure) == (None, None, None)
    return reaction.violation.code, reaction.violation.message


def accepted(reaction: Reaction) -> tuple[Record | None, Resolution | None]:
    assert (reaction.violation, reaction.failure) == (None, None), reaction
    return reaction.record, reaction.resolves


# ------------------------------------------------------------------ hello


def test_the_hello_is_recorded_with_the_declared_conditions():
    state = ProtocolState()
    record, resolves = accepted(accept(state, HELLO))
    assert record == Record(
        EventKind.ADAPTER_HELLO,
        NS,
        T,
        {
            "adapter": "a",
            "adapter_version": "1.2",
            "protocol": PROTOCOL_VERSION,
            "conditions": CONDITIONS.model_dump(),
            "gpu": None,
            "audio": False,
        },
    )
    assert record.payload == hello_payload(HELLO)
    gpu_hello = HELLO.model_copy(update={"gpu": "NVIDIA H200 GPU-5f0c"})
    gpu_record, _ = accepted(accept(ProtocolState(), gpu_hello))
    assert gpu_record.payload["gpu"] == "NVIDIA H200 GPU-5f0c"
    assert resolves is None
    assert state.hello == HELLO


@pytest.mark.parametrize(
    ("message", "first"),
    [
        (FrameAck(index=0), "frame_ack"),
        (AdapterError(code="c", message="m", fatal=True), "error"),
        (ProtocolError(code="c", message="m"), "protocol_error"),
        (SessionClosed(), "session_closed"),
    ],
)
def test_nothing_is_accepted_before_the_hello(message, first):
    state = ProtocolState()
    assert violation(accept(state, message)) == ("out_of_order", f"{first} before hello")
    assert state.hello is None


def test_another_protocol_version_is_recorded_then_refused():
    state = ProtocolState()
    old = HELLO.model_copy(update={"protocol": "streameval/0"})
    reaction = accept(state, old)
    assert reaction.record is not None and reaction.record.payload["protocol"] == "streameval/0"
    assert reaction.violation is not None
    assert (reaction.violation.code, reaction.violation.message) == (
        "version",
        f"adapter speaks streameval/0, core speaks {PROTOCOL_VERSION}",
    )
    # The outcome still names the adapter that was met.
    assert state.hello == old


def test_a_second_hello_is_out_of_order():
    state = greeted()
    assert violation(accept(state, HELLO)) == ("out_of_order", "unexpected hello after hello")


# ------------------------------------------------------------------ frames


def test_an_ack_of_a_sent_frame_resolves_its_wait():
    state = greeted(frames=(0, 1))
    record, resolves = accepted(accept(state, FrameAck(index=1), arrived_ns=42))
    assert record == Record(EventKind.FRAME_ACK, 42, T, {"index": 1})
    assert resolves == Resolution(Awaited.ACK, 1)


def test_an_ack_for_an_unsent_frame_is_out_of_order():
    state = greeted(frames=(0,))
    assert violation(accept(state, FrameAck(index=4))) == (
        "out_of_order",
        "ack for unsent frame 4",
    )


def test_the_ack_fast_path_judges_an_ack_as_accept_does():
    """`accept_ack` is what the receive side uses for a canonical frame_ack: the same
    rules, the same violations, the same count towards the session's event cap."""

    def judged(state: ProtocolState, index: int) -> tuple[str, str] | None:
        found = state.accept_ack(index)
        return None if found is None else (found.code, found.message)

    assert judged(ProtocolState(), 0) == ("out_of_order", "frame_ack before hello")
    assert violation(accept(ProtocolState(), FrameAck(index=0))) == (
        "out_of_order",
        "frame_ack before hello",
    )
    state = greeted(frames=(0,))
    assert judged(state, 4) == ("out_of_order", "ack for unsent frame 4")
    capped = ProtocolState(ResponseLimits(max_events=2))
    accept(capped, HELLO)  # recorded: the first of two
    capped.frame_sent(0)
    assert judged(capped, 0) is None  # the second
    assert judged(capped, 0)[0] == "too_many_events"
    assert violation(accept(capped, FrameAck(index=0)))[0] == "too_many_events"


# ------------------------------------------------------------------ responses


def test_a_response_is_recorded_start_deltas_final_and_resolves_the_decision():
    state = greeted("q")
    record, resolves = accepted(accept(state, ResponseStart(response_id="r1", task_id="q")))
    assert record == Record(EventKind.RESPONSE_START, NS, T, {"response_id": "r1", "task_id": "q"})
    assert resolves is None
    assert state.response_open

    for seq, text in enumerate(["A", "AB"]):
        delta = ResponseDelta(response_id="r1", seq=seq, text=text, snapshot=seq == 1)
        record, resolves = accepted(accept(state, delta))
        assert record == Record(
            EventKind.RESPONSE_DELTA,
            NS,
            T,
            {"response_id": "r1", "seq": seq, "text": text, "snapshot": seq == 1},
        )
        assert resolves is None

    final = ResponseFinal(response_id="r1", text="AB", output_tokens=2)
    record, resolves = accepted(accept(state, final))
    assert record == Record(
        EventKind.RESPONSE_FINAL,
        NS,
        T,
        {"response_id": "r1", "text": "AB", "output_tokens": 2, "input_tokens": None},
    )
    # A final carries no step: it resolves whatever decision is awaited.
    assert resolves == Resolution(Awaited.DECISION, None)
    assert not state.response_open


def test_delta_seq_starts_again_at_zero_for_each_response():
    state = opened("r1")
    accepted(accept(state, ResponseDelta(response_id="r1", seq=0, text="x")))
    accepted(accept(state, ResponseFinal(response_id="r1", text="x")))
    accepted(accept(state, ResponseStart(response_id="r2", task_id="q")))
    accepted(accept(state, ResponseDelta(response_id="r2", seq=0, text="y")))


def test_response_start_before_any_task_is_out_of_order():
    state = greeted(frames=(0,))
    assert violation(accept(state, ResponseStart(response_id="r", task_id="q"))) == (
        "out_of_order",
        "response_start before any question, instruction or step",
    )


def test_response_start_for_an_unknown_task_is_out_of_order():
    state = greeted("q")
    assert violation(accept(state, ResponseStart(response_id="r", task_id="zz"))) == (
        "out_of_order",
        "response_start for unknown task 'zz'",
    )


def test_response_start_while_another_is_open_is_out_of_order():
    state = opened("r1")
    assert violation(accept(state, ResponseStart(response_id="r2", task_id="q"))) == (
        "out_of_order",
        "response_start while r1 is still open",
    )
    # The violation changed nothing: r1 is still the open response.
    assert state.open_response == "r1"


def test_a_reused_response_id_is_out_of_order():
    state = opened("r1")
    accepted(accept(state, ResponseFinal(response_id="r1", text="A")))
    assert violation(accept(state, ResponseStart(response_id="r1", task_id="q"))) == (
        "out_of_order",
        "reused response id r1",
    )
    assert not state.response_open


def test_a_delta_seq_gap_is_out_of_order():
    state = opened("r1")
    accepted(accept(state, ResponseDelta(response_id="r1", seq=0, text="a")))
    assert violation(accept(state, ResponseDelta(response_id="r1", seq=2, text="c"))) == (
        "out_of_order",
        "delta seq 2, expected 1",
    )
    # The expected seq did not move: seq 1 is still the next legal delta.
    accepted(accept(state, ResponseDelta(response_id="r1", seq=1, text="b")))


@pytest.mark.parametrize("open_first", [False, True])
def test_delta_and_final_for_an_unopened_response_are_out_of_order(open_first):
    state = opened("r1") if open_first else greeted("q")
    delta = ResponseDelta(response_id="x", seq=0, text="a")
    assert violation(accept(state, delta)) == (
        "out_of_order",
        "response_delta for unopened response 'x'",
    )
    assert violation(accept(state, ResponseFinal(response_id="x", text="a"))) == (
        "out_of_order",
        "response_final for unopened response 'x'",
    )


# ------------------------------------------------------------------ silence


def test_silent_at_a_step_is_recorded_and_resolves_that_step():
    state = greeted()
    state.step_sent("p")  # a step makes its task answerable, before any instruction
    record, resolves = accepted(accept(state, Silent(task_id="p", step=3)))
    assert record == Record(EventKind.SILENT, NS, T, {"task_id": "p", "step": 3})
    assert resolves == Resolution(Awaited.DECISION, 3)


def test_silent_declining_a_question_resolves_any_decision():
    state = greeted("q")
    record, resolves = accepted(accept(state, Silent(task_id="q")))
    assert record == Record(EventKind.SILENT, NS, T, {"task_id": "q", "step": None})
    assert resolves == Resolution(Awaited.DECISION, None)


def test_silent_while_a_response_is_open_is_out_of_order():
    state = opened("r1")
    assert violation(accept(state, Silent(task_id="q", step=0))) == (
        "out_of_order",
        "silent while a response is open",
    )


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ((), "silent before any question, instruction or step"),
        (("q",), "silent for unknown task 'p'"),
    ],
)
def test_silent_for_no_or_an_unknown_task_is_out_of_order(tasks, message):
    state = greeted(*tasks)
    assert violation(accept(state, Silent(task_id="p"))) == ("out_of_order", message)


# ------------------------------------------------------------------ workload, errors


def test_workload_is_recorded_with_its_own_kind_field():
    state = greeted()
    workload = Workload(kind="model_call", frame_ids=["v:0"], images=1, input_tokens=9)
    record, resolves = accepted(accept(state, workload))
    assert record is not None and record.kind == EventKind.WORKLOAD
    assert record.payload == {
        "kind": "model_call",
        "frame_ids": ["v:0"],
        "images": 1,
        "pixels": None,
        "replayed_frames": None,
        "prefix_shared_images": None,
        "audio_seconds": None,
        "audio_tokens": None,
        "input_tokens": 9,
        "output_tokens": None,
        "started_ns": None,
        "ended_ns": None,
    }
    assert resolves is None


def test_a_non_fatal_adapter_error_is_only_recorded():
    state = greeted()
    record, resolves = accepted(accept(state, AdapterError(code="slow", message="lagging")))
    assert record == Record(
        EventKind.ADAPTER_ERROR, NS, T, {"code": "slow", "message": "lagging", "fatal": False}
    )
    assert resolves is None


def test_a_fatal_adapter_error_is_recorded_then_fails_the_session():
    state = greeted()
    reaction = accept(state, AdapterError(code="oom", message="out of memory", fatal=True))
    assert reaction.record == Record(
        EventKind.ADAPTER_ERROR, NS, T, {"code": "oom", "message": "out of memory", "fatal": True}
    )
    failure = reaction.failure
    assert isinstance(failure, SessionFailure)
    assert (failure.stage, failure.reason, failure.cause) == (
        "adapter",
        "adapter error oom: out of memory",
        "adapter",
    )
    assert (reaction.violation, reaction.resolves) == (None, None)


def test_a_protocol_error_from_the_adapter_fails_the_session_unrecorded():
    state = greeted()
    reaction = accept(state, ProtocolError(code="out_of_order", message="frame before start"))
    assert (reaction.record, reaction.resolves, reaction.violation) == (None, None, None)
    failure = reaction.failure
    assert failure is not None
    assert (failure.stage, failure.reason, failure.cause) == (
        FailureStage.STREAMING,
        "adapter reported protocol error out_of_order: frame before start",
        "adapter",
    )


# ------------------------------------------------------------------ closing


def test_session_closed_before_session_end_is_out_of_order():
    state = greeted()
    assert violation(accept(state, SessionClosed())) == (
        "out_of_order",
        "session_closed before session_end",
    )


def test_session_closed_after_session_end_resolves_the_close_unrecorded():
    state = greeted()
    state.end()
    assert state.ending
    assert accepted(accept(state, SessionClosed())) == (None, Resolution(Awaited.CLOSED))


# ------------------------------------------------------------------ resolutions, stages


@pytest.mark.parametrize(
    ("delivered", "expected", "match"),
    [
        (Resolution(Awaited.ACK, 1), Resolution(Awaited.ACK, 1), True),
        (Resolution(Awaited.ACK, 2), Resolution(Awaited.ACK, 1), False),
        (Resolution(Awaited.DECISION, 3), Resolution(Awaited.DECISION, None), True),
        (Resolution(Awaited.DECISION, None), Resolution(Awaited.DECISION, 3), True),
        (Resolution(Awaited.DECISION, 2), Resolution(Awaited.DECISION, 3), False),
        (Resolution(Awaited.ACK, 3), Resolution(Awaited.DECISION, 3), False),
        (Resolution(Awaited.CLOSED), Resolution(Awaited.CLOSED), True),
    ],
)
def test_what_a_resolution_satisfies(delivered, expected, match):
    assert delivered.satisfies(expected) is match


def test_failure_stages_are_the_recorded_strings():
    assert {stage.value for stage in FailureStage} == {
        "connect",
        "handshake",
        "streaming",
        "response",
        "protocol",
        "adapter",
        "frames",
    }
    assert f"{FailureStage.PROTOCOL}" == "protocol"
    assert str(SessionFailure(FailureStage.RESPONSE, "no answer", "infrastructure")) == (
        "response: no answer"
    )

"""The `openai` adapter in full sessions: a real Core run, the adapter in its own process, and
an OpenAI-compatible streaming server on loopback (tests/openai_stand_in.py) that answers
like vLLM's (SSE chunks, a closing usage chunk, `data: [DONE]`) and records every request.

The server's "model" reads the frame labels of the prompt: at a question it answers "B. two"
in three pieces; at a proactive decision it responds when the newest frame is at 8 s or 12 s
and says WAIT otherwise. Other servers stall, fail with HTTP errors or drop the connection.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from websockets.asyncio.client import connect as ws_connect

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import (
    FEATURES_HEADER,
    PROTOCOL_VERSION,
    RESUME_FEATURE,
    Instruction,
    SessionStart,
)
from tests.openai_stand_in import FakeOpenAIServer, Reply, images, labels
from tests.test_core_run import events_by_session, execute, run_config
from tests.test_protocol import CONDITIONS
from tests.timeline_fixtures import QA, VIDEO_FPS, write_benchmark

FIRST_TOKEN_DELAY_S = 0.15


def oracle(body: dict, index: int) -> Reply:
    """A deterministic "model" that reads the prompt's frame labels."""
    prompt = body["messages"][-1]["content"][-1]["text"]
    if "Question:" in prompt:
        return Reply(["B", ".", " two"], first_piece_delay_s=FIRST_TOKEN_DELAY_S)
    newest = labels(body)[-1]
    if newest == 8.0:
        return Reply(["The", " count", " is", " 2."])
    if newest == 12.0:
        return Reply(["W", "ow, 3."])  # starts like WAIT: held back, then released
    return Reply(["WA", "IT"])


# --------------------------------------------------------------------------- helpers


def adapter(base_url: str, **options) -> AdapterProcess:
    return AdapterProcess("openai", options={"base_url": base_url, "model": "fake-vl", **options})


def grey_of(data_url: str) -> tuple[tuple[int, int], float]:
    prefix = "data:image/jpeg;base64,"
    assert data_url.startswith(prefix)
    with Image.open(io.BytesIO(base64.b64decode(data_url[len(prefix) :]))) as image:
        assert image.format == "JPEG"
        return image.size, float(np.asarray(image.convert("L")).mean())


def expected_grey(t: float) -> int:
    """timeline_fixtures: source frame n is grey (n * 7) % 256; 1 fps samples n = t * 10."""
    return (round(t * VIDEO_FPS) * 7) % 256


def of_kind(events: list, kind: EventKind) -> list:
    return [e for e in events if e.kind == kind]


def workloads(events: list, kind: str = "model_call") -> list[dict]:
    return [
        e.payload.model_dump()
        for e in of_kind(events, EventKind.WORKLOAD)
        if e.payload.kind == kind
    ]


def errors(events: list) -> list[tuple[str, bool]]:
    return [(e.payload.code, e.payload.fatal) for e in of_kind(events, EventKind.ADAPTER_ERROR)]


def run_against(base_url: str, tmp_path: Path, benchmark: Path, options: dict, **run) -> tuple:
    """Serve the adapter against `base_url`, run the benchmark, return what was recorded."""
    with adapter(base_url, **options) as process, Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        summary = execute(run_config(benchmark, tmp_path, process.url, **run), store)
        sessions = {s.session_id: s for s in store.sessions(summary.run_id)}
        return summary, sessions, events_by_session(store, summary.run_id)


@pytest.fixture
def qa_benchmark(tmp_path: Path) -> Path:
    return write_benchmark(tmp_path / "qa-bench", records=(QA,))


# --------------------------------------------------------------------------- a full run


def test_questions_and_proactive_decisions_over_a_real_stream(benchmark_path, tmp_path):
    options = {"qa_max_frames": 8, "proactive_interval_s": 2, "proactive_window_frames": 3}
    with FakeOpenAIServer(oracle) as server:
        summary, _, events = run_against(server.base_url, tmp_path, benchmark_path, options)
    assert (summary.finished, summary.failed) == (3, 0)
    by_kind = {"qa": [], "proactive": []}
    for body in server.requests:
        prompt = body["messages"][-1]["content"][-1]["text"]
        by_kind["qa" if "Question:" in prompt else "proactive"].append(body)
        assert body["model"] == "fake-vl" and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert (body["temperature"], body["seed"]) == (0.0, 0)
        # Every image is the frame its label names: a real JPEG data URL of that grey.
        for t, url in zip(labels(body), images(body), strict=True):
            size, grey = grey_of(url)
            assert size == (64, 48) and abs(grey - expected_grey(t)) <= 2

    # QA at 17 s (history 5..17 s): the newest 8 frames; QA at 6.4 s: all 7 frames 0..6 s.
    qa_windows = sorted(labels(body) for body in by_kind["qa"])
    assert qa_windows == [[float(t) for t in range(0, 7)], [float(t) for t in range(10, 18)]]
    question = by_kind["qa"][0]["messages"][-1]["content"][-1]["text"]
    assert "Question: Which?\nOptions:\nA. one\nB. two\n" in question

    qa = events["t:qa:1"]
    final = of_kind(qa, EventKind.RESPONSE_FINAL)[0].payload.model_dump()
    assert (final["text"], final["output_tokens"], final["input_tokens"]) == ("B. two", 3, 850)
    assert [e.payload.text for e in of_kind(qa, EventKind.RESPONSE_DELTA)] == ["B", ".", " two"]
    asked = of_kind(qa, EventKind.QUESTION_SENT)[0].runtime_ns
    first_token = of_kind(qa, EventKind.RESPONSE_START)[0].runtime_ns
    assert first_token - asked >= FIRST_TOKEN_DELAY_S * 1e9  # TTFT includes the server's wait
    (call,) = workloads(qa)
    assert (call["images"], call["replayed_frames"], call["pixels"]) == (8, 0, 8 * 64 * 48)
    assert (call["input_tokens"], call["output_tokens"]) == (850, 3)
    assert len(call["frame_ids"]) == 8 and call["started_ns"] < call["ended_ns"]

    # Proactive: a decision every 2 s from the instruction (4 s) over the newest 3 frames.
    decided_at = [4, 6, 8, 10, 12, 14, 16]
    assert [labels(body) for body in by_kind["proactive"]] == [
        [float(t - 2), float(t - 1), float(t)] for t in decided_at
    ]
    reminded = by_kind["proactive"][3]["messages"][-1]["content"][-1]["text"]
    assert 'Your earlier responses: "The count is 2." at 8s.' in reminded
    pro = events["t:pro:1"]
    finals = of_kind(pro, EventKind.RESPONSE_FINAL)
    assert [f.payload.text for f in finals] == ["The count is 2.", "Wow, 3."]
    deltas = [e.payload.text for e in of_kind(pro, EventKind.RESPONSE_DELTA)]
    # "W" could have been WAIT: it went out with the next piece, as the response's first token.
    assert deltas == ["The", " count", " is", " 2.", "Wow, 3."]
    assert [e.video_t for e in of_kind(pro, EventKind.RESPONSE_START)] == [8.0, 12.0]
    # WAIT is silence: 14 steps (4..17 s), two answered, the other twelve silent.
    silent_steps = [e.payload.step for e in of_kind(pro, EventKind.SILENT)]
    assert silent_steps == [s for s in range(14) if s not in (4, 8)]
    calls = workloads(pro)
    assert [c["images"] for c in calls] == [3] * 7
    # Each window shares its oldest frame with the previous one: a replay.
    assert [c["replayed_frames"] for c in calls] == [0] + [1] * 6
    assert sum(len(c["frame_ids"]) for c in calls) == 21
    assert len({i for c in calls for i in c["frame_ids"]}) == 15
    assert [c["output_tokens"] for c in calls] == [2, 2, 4, 2, 2, 2, 2]
    assert {c["input_tokens"] for c in calls} == {350}
    assert errors(pro) == [] and errors(qa) == []


# --------------------------------------------------------------------------- wall clock


def slow_waiting_model(body: dict, index: int) -> Reply:
    return Reply(["WAIT"], first_piece_delay_s=0.6)


@pytest.mark.parametrize("policy", ["drop", "buffer"])
def test_frames_arriving_during_a_call_follow_the_declared_policy(policy, benchmark_path, tmp_path):
    """Wall clock at 4x: a frame every 0.25 s while each decision takes over 0.6 s."""
    options = {"frames_during_call": policy, "proactive_window_frames": 3}
    with FakeOpenAIServer(slow_waiting_model) as server:
        summary, _, events = run_against(
            server.base_url,
            tmp_path,
            benchmark_path,
            options,
            tasks=["proactive"],
            pacing="wall_clock",
            speed=4.0,
        )
    assert (summary.finished, summary.failed) == (1, 0)
    pro = events["t:pro:1"]
    hello = of_kind(pro, EventKind.ADAPTER_HELLO)[0].payload.conditions
    assert hello.initiation == "autonomous"
    assert hello.history.endswith(f"frames arriving during a call: {policy}")
    calls = workloads(pro)
    assert len(calls) >= 2 and len(server.requests) >= len(calls)
    submitted = {i for c in calls for i in c["frame_ids"]}
    dropped = [d["frame_ids"] for d in workloads(pro, "drop")]
    sent = {e.payload.frame_id: e.runtime_ns for e in of_kind(pro, EventKind.FRAME_SENT)}
    # Frames the Core sent well inside a call's interval (100 ms from its edges).
    during = {
        frame_id
        for frame_id, ns in sent.items()
        for c in calls
        if c["started_ns"] + 100e6 < ns < c["ended_ns"] - 100e6
    }
    assert during, "no frame arrived during a call; the test's timing did not hold"
    if policy == "drop":
        assert all(len(ids) == 1 for ids in dropped)
        assert during <= {ids[0] for ids in dropped}
        assert not submitted & {ids[0] for ids in dropped}
    else:
        assert dropped == []
        assert during & submitted  # kept and shown to the model at a later decision
    assert of_kind(pro, EventKind.SILENT)  # every decision was WAIT


# --------------------------------------------------------------------------- failures


def test_a_stalling_server_times_out_retries_once_then_fails_the_session(qa_benchmark, tmp_path):
    options = {"read_timeout_s": 0.3, "max_retries": 1, "retry_backoff_s": 0.05, "qa_max_frames": 8}
    with FakeOpenAIServer(lambda body, i: Reply(["B"], stall_s=5.0)) as server:
        summary, sessions, events = run_against(server.base_url, tmp_path, qa_benchmark, options)
    assert (summary.finished, summary.failed) == (0, 1)
    assert len(server.requests) == 2
    qa = events["t:qa:1"]
    assert errors(qa) == [("model_call_retry", False), ("model_call_failed", True)]
    session = sessions["t:qa:1"]
    assert session.failure_stage == "adapter"
    assert session.failure_reason == (
        "adapter error model_call_failed: model call failed 2 times, giving up: no data for "
        f"0.3s (read timeout) from {server.base_url}/chat/completions"
    )
    # Both attempts reached the model with their 8 images; no token counts came back.
    calls = workloads(qa)
    assert [(c["images"], c["replayed_frames"]) for c in calls] == [(8, 0), (8, 8)]
    assert {(c["input_tokens"], c["output_tokens"]) for c in calls} == {(None, None)}
    assert of_kind(qa, EventKind.RESPONSE_START) == []


@pytest.mark.parametrize(
    ("statuses", "expected_errors", "finished"),
    [
        # Overloaded every time: two retries, then a fatal error.
        (
            [503, 503, 503],
            [("model_call_retry", False), ("model_call_retry", False), ("model_call_failed", True)],
            False,
        ),
        # Overloaded once: the retry answers and the session finishes.
        ([503, 200], [("model_call_retry", False)], True),
        # A bad request is not retried.
        ([400], [("model_call_refused", True)], False),
    ],
)
def test_http_errors_are_retried_as_declared(
    statuses, expected_errors, finished, qa_benchmark, tmp_path
):
    def script(body: dict, index: int) -> Reply:
        return Reply(["B"], status=statuses[index])

    options = {"max_retries": 2, "retry_backoff_s": 0.05, "qa_max_frames": 4}
    with FakeOpenAIServer(script) as server:
        summary, sessions, events = run_against(server.base_url, tmp_path, qa_benchmark, options)
    assert len(server.requests) == len(statuses)
    qa = events["t:qa:1"]
    assert errors(qa) == expected_errors
    calls = workloads(qa)
    assert [c["replayed_frames"] for c in calls] == [0] + [4] * (len(statuses) - 1)
    if finished:
        assert (summary.finished, summary.failed) == (1, 0)
        assert of_kind(qa, EventKind.RESPONSE_FINAL)[0].payload.text == "B"
        assert (calls[-1]["input_tokens"], calls[-1]["output_tokens"]) == (450, 1)
    else:
        session = sessions["t:qa:1"]
        assert (session.status, session.failure_stage) == ("failed", "adapter")
        code = statuses[-1]
        assert f"HTTP {code} from {server.base_url}/chat/completions: engine overloaded" in (
            session.failure_reason
        )


def test_a_connection_dropped_before_the_answer_is_retried(qa_benchmark, tmp_path):
    def script(body: dict, index: int) -> Reply:
        return Reply(["B"], drop_after=0 if index == 0 else None)

    with FakeOpenAIServer(script) as server:
        summary, _, events = run_against(
            server.base_url, tmp_path, qa_benchmark, {"retry_backoff_s": 0.05}
        )
    assert (summary.finished, summary.failed) == (1, 0)
    qa = events["t:qa:1"]
    assert errors(qa) == [("model_call_retry", False)]
    assert "RemoteProtocolError" in of_kind(qa, EventKind.ADAPTER_ERROR)[0].payload.message
    assert [f.payload.text for f in of_kind(qa, EventKind.RESPONSE_FINAL)] == ["B"]


def test_a_connection_dropped_mid_answer_fails_the_session(qa_benchmark, tmp_path):
    """Text already delivered cannot be taken back, so the broken answer is not retried."""
    with FakeOpenAIServer(lambda body, i: Reply(["B", ".", " two"], drop_after=2)) as server:
        summary, sessions, events = run_against(server.base_url, tmp_path, qa_benchmark, {})
    assert (summary.finished, summary.failed) == (0, 1)
    assert len(server.requests) == 1
    qa = events["t:qa:1"]
    assert errors(qa) == [("model_stream_broken", True)]
    assert [e.payload.text for e in of_kind(qa, EventKind.RESPONSE_DELTA)] == ["B", "."]
    assert of_kind(qa, EventKind.RESPONSE_FINAL) == []
    assert sessions["t:qa:1"].failure_reason.startswith(
        "adapter error model_stream_broken: the model's stream broke after the answer began"
    )


def test_an_unreachable_server_submits_nothing_and_fails_after_the_retries(qa_benchmark, tmp_path):
    nowhere = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    options = {"max_retries": 1, "retry_backoff_s": 0.05}
    summary, sessions, events = run_against(nowhere, tmp_path, qa_benchmark, options)
    assert (summary.finished, summary.failed) == (0, 1)
    qa = events["t:qa:1"]
    assert errors(qa) == [("model_call_retry", False), ("model_call_failed", True)]
    assert workloads(qa) == []  # the images never reached a model
    assert "ConnectError talking to http://127.0.0.1:9/v1/chat/completions" in (
        sessions["t:qa:1"].failure_reason
    )


def test_a_call_the_core_gave_up_on_closes_its_http_stream_within_a_second(qa_benchmark, tmp_path):
    """The server stalls for a minute (the read timeout is the default 60 s); the Core gives
    up after 1 s. The adapter's hook is cancelled and its HTTP stream closed, so the
    server sees the request go away (and frees its slot) at once, not a minute later."""
    with FakeOpenAIServer(lambda body, i: Reply(["B"], stall_s=60.0)) as server:
        summary, sessions, events = run_against(
            server.base_url, tmp_path, qa_benchmark, {}, response_timeout_s=1.0
        )
        deadline = time.monotonic() + 10  # the server notices on its own loop
        while len(server.disconnected) < len(server.requests):
            assert time.monotonic() < deadline, "a request was never closed"
            time.sleep(0.01)
    assert (summary.finished, summary.failed) == (0, 1)
    assert sessions["t:qa:1"].failure_reason == "no answer within 1s"
    qa = events["t:qa:1"]
    gave_up = [e.runtime_ns for e in of_kind(qa, EventKind.SESSION_FAILED)]
    assert len(server.requests) == len(gave_up) >= 1  # one call per attempt, none retried
    closed = [server.disconnected[i] for i in range(len(server.requests))]
    for failed_ns, closed_ns in zip(gave_up, closed, strict=True):
        assert 0 <= closed_ns - failed_ns < 1_000_000_000
    assert workloads(qa) == [] and errors(qa) == []  # the cancelled call recorded nothing


async def _drop_during_unattended_decision(url: str, server: FakeOpenAIServer) -> int:
    """A wall-clock proactive session whose first decision (a background task, started at
    the instruction) is under way; then the connection drops, the session kept for a
    resume. Returns when it dropped (monotonic ns)."""
    conditions = CONDITIONS.model_copy(update={"pacing": "wall_clock"})
    start = SessionStart(
        protocol=PROTOCOL_VERSION,
        run_id="r",
        session_id="s",
        record_ids=["p"],
        conditions=conditions,
    )
    async with ws_connect(url, additional_headers={FEATURES_HEADER: RESUME_FEATURE}) as ws:
        await ws.recv()  # the hello
        await ws.send(start.model_dump_json())
        await ws.send(Instruction(task_id="p", t=0.0, text="Say when.").model_dump_json())
        deadline = time.monotonic() + 10
        while not server.requests:
            assert time.monotonic() < deadline, "no decision began"
            await asyncio.sleep(0.01)
        dropped = time.monotonic_ns()
        ws.transport.abort()
    return dropped


def test_a_decision_nobody_waits_for_is_cancelled_when_the_connection_drops():
    """Under wall-clock pacing a decision runs beside the hooks; a dropped connection
    (kept 30 s for a resume) cancels it too, closing its HTTP stream at once."""
    stalling = FakeOpenAIServer(lambda body, i: Reply(["WAIT"], stall_s=60.0))
    with stalling as server, adapter(server.base_url) as served:
        dropped = asyncio.run(_drop_during_unattended_decision(served.url, server))
        deadline = time.monotonic() + 10
        while 0 not in server.disconnected:
            assert time.monotonic() < deadline, "the decision's request was never closed"
            time.sleep(0.01)
    assert len(server.requests) == 1
    assert 0 <= server.disconnected[0] - dropped < 1_000_000_000


# --------------------------------------------------------------------------- reply parsing


@pytest.mark.parametrize(
    ("reply", "silent", "undecided_prefix"),
    [
        ("WAIT", True, True),
        (" wait.\n", True, True),
        ("**WAIT**", True, True),
        ("", True, True),
        ("WA", False, True),  # could still become WAIT
        ("Waiting for the ball", False, False),
        ("W: the ball is red", False, False),
        ("The ball is red", False, False),
    ],
)
def test_the_wait_word_and_the_hold_back(reply, silent, undecided_prefix):
    from streameval.adapters.chat_prompts import is_silence, may_still_be_wait

    assert is_silence(reply, "WAIT") is silent
    assert may_still_be_wait(reply, "WAIT") is undecided_prefix


def test_uniform_selection_spreads_from_the_first_frame_to_the_newest():
    from streameval.adapters.chat_prompts import PromptImage
    from streameval.adapters.video_chat import _select

    frames = [PromptImage(str(t), float(t), 1, 1, b"") for t in range(5, 18)]
    assert [f.t for f in _select(frames, 5, "uniform")] == [5, 8, 11, 14, 17]
    assert [f.t for f in _select(frames, 3, "recent")] == [15, 16, 17]
    assert _select(frames[:2], 5, "uniform") == frames[:2]


def test_info_names_the_servers_prometheus_endpoint() -> None:
    """`streameval capacity` reads the model server's metrics where the adapter's /info
    names them: vLLM serves /metrics at the root of the `base_url`'s host."""
    base_url = "http://127.0.0.1:9/v1"  # nothing is called: /info is the adapter's own
    with adapter(base_url) as served:
        info = httpx.get(f"http://127.0.0.1:{served.port}/info", timeout=10).json()
    assert info["server_metrics_url"] == "http://127.0.0.1:9/metrics"
    assert info["adapter"] == "openai"

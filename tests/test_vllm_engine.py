"""The `vllm` adapter against a stand-in `vllm` package (tests/stand_in_vllm): start-up while
loading, the readiness protocol, engine_args checks and every engine error type.

The stand-in mimics vLLM's import paths and engine classes and is scripted by environment
variables; the chat template comes from a tiny Qwen2-VL written to disk (tests/tiny_qwen2vl).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.model_stack import require_model_stack

require_model_stack()
pytestmark = pytest.mark.models  # .ci/run runs these in its model-stack venv

from streameval.adapters.config import AdapterConfigError  # noqa: E402
from streameval.adapters.registry import load_adapter  # noqa: E402
from streameval.adapters.sdk import Frame, Responder, Session  # noqa: E402
from streameval.core.config import EndpointConfig, RunConfig  # noqa: E402
from streameval.core.launch.adapter_process import AdapterProcess  # noqa: E402
from streameval.core.run.errors import RunError, RunStopped  # noqa: E402
from streameval.core.run.runner import RunExecutor  # noqa: E402
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S  # noqa: E402
from streameval.core.session.connection import connect_adapter  # noqa: E402
from streameval.core.session.failures import SessionFailure  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402
from streameval.events import EventKind  # noqa: E402
from streameval.protocol import HEARTBEAT_TIMEOUT_S, Question, RunConditions  # noqa: E402
from tests.recording import Wire  # noqa: E402
from tests.timeline_fixtures import QA, write_benchmark  # noqa: E402
from tests.tiny_qwen2vl import build_tiny_model, with_chat_template  # noqa: E402
from tests.vllm_stand_in import log_entries  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return with_chat_template(build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen2-vl"))


# ------------------------------------------------------------------ engine_args, at start


@pytest.mark.parametrize(
    ("engine_args", "message"),
    [
        (
            {"max_model_len": 4096},
            "engine_args.max_model_len conflicts with the option max_model_len; give it once",
        ),
        (
            {"model": "other"},
            "engine_args.model conflicts with the option model; give it once",
        ),
        (
            {"max_modle_len": 4096},
            "engine_args.max_modle_len is not a vLLM engine argument (an AsyncEngineArgs "
            "field); did you mean max_model_len?",
        ),
        (
            {"limit_mm_per_prompt": {"image": 2}},
            "engine_args.limit_mm_per_prompt.image=2 is below the 16 images a call submits "
            "(max of qa_max_frames and proactive_window_frames, or reanchor_frames with "
            "proactive_window: append)",
        ),
        (
            {"pipeline_parallel_size": 2, "tensor_parallel_size": 2},
            "engine_args.tensor_parallel_size conflicts with the option tensor_parallel_size; "
            "give it once",
        ),
    ],
)
def test_engine_args_are_checked_when_the_adapter_is_built(stand_in, engine_args, message):
    log = stand_in()
    with pytest.raises(AdapterConfigError) as raised:
        load_adapter("vllm", {"model": "m", "engine_args": engine_args})
    assert str(raised.value) == message
    assert log_entries(log, "built") == []  # refused before any engine was started


def test_a_value_vllm_refuses_is_one_line_at_start(stand_in):
    stand_in()
    with pytest.raises(AdapterConfigError) as raised:
        load_adapter("vllm", {"model": "m", "engine_args": {"max_num_seqs": 0}})
    assert str(raised.value) == "engine_args: max_num_seqs must be at least 1, got 0"


def test_engine_args_merge_with_the_adapter_options(stand_in):
    stand_in()
    adapter = load_adapter(
        "vllm",
        {
            "model": "m",
            "max_model_len": 8192,
            "engine_args": {"max_num_seqs": 8, "limit_mm_per_prompt": {"video": 1}},
        },
    )
    kwargs = adapter.engine_kwargs
    assert kwargs["max_model_len"] == 8192 and kwargs["max_num_seqs"] == 8
    assert kwargs["limit_mm_per_prompt"] == {"image": 16, "video": 1}
    assert kwargs["model"] == "m" and kwargs["trust_remote_code"] is False


def test_a_conflict_in_a_served_adapter_is_one_line_and_no_listening(stand_in):
    stand_in()
    command = [
        sys.executable,
        "-m",
        "streameval.adapters",
        "vllm",
        "--port",
        "0",
        "-A",
        "model=m",
        "-A",
        'engine_args={"max_model_len": 4096}',
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2  # it could not start: nothing listened
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "error: engine_args.max_model_len conflicts with the option max_model_len; give it once"
    ]


# ------------------------------------------------------------------ errors, in process


def ask(adapter, frames: int = 2) -> Wire:
    """A session: `frames` frames, then a question; what the adapter sent."""
    wire = Wire()
    conditions = RunConditions(
        profile="trace",
        pacing="logical",
        fps=1.0,
        max_width=960,
        jpeg_quality=90,
        qa_history_s=10,
        proactive_lead_s=5,
    )
    session = Session("run", "s", ["r"], conditions, wire.send)

    async def go() -> None:
        await adapter.on_session_start(session)
        for index in range(frames):
            data = io.BytesIO()
            Image.fromarray(np.full((48, 64, 3), 30 * index, dtype=np.uint8)).save(data, "JPEG")
            await adapter.on_frame(
                session, Frame(index, f"f{index}", index, 64, 48, data.getvalue())
            )
        question = Question(task_id="q", t=float(frames), text="Which?", options=["A. a", "B. b"])
        await adapter.on_question(session, question, Responder(wire.send, "q"))
        await adapter.on_session_end(session)

    asyncio.run(go())
    return wire


def errors(wire: Wire) -> list[tuple[str, bool, str]]:
    return [(m["code"], m["fatal"], m["message"]) for m in wire.of("error")]


def model_calls(wire: Wire) -> list[dict]:
    return wire.workloads("model_call")


@pytest.fixture
def engine(stand_in, tiny_model):
    def build(script: str = "", **options):
        log = stand_in(script=script)
        options = {"model": str(tiny_model), "retry_backoff_s": 0, **options}
        return load_adapter("vllm", options), log

    return build


def test_an_answer_streams_with_its_token_counts(engine):
    adapter, log = engine(max_tokens_qa=4)
    with_reply = os.environ.copy()
    assert with_reply["STAND_IN_VLLM_LOG"]
    wire = ask(adapter)
    assert errors(wire) == []
    (final,) = wire.of("response_final")
    assert final["text"] == "A" and final["output_tokens"] == 1 and final["input_tokens"] > 0
    (call,) = model_calls(wire)
    assert call["images"] == 2 and call["frame_ids"] == ["f0", "f1"]
    (built,) = log_entries(log, "built")
    assert built["args"]["limit_mm_per_prompt"] == {"image": 16}


def test_a_generate_error_is_retried_then_the_answer_comes(engine):
    adapter, _ = engine("generate")
    wire = ask(adapter)
    ((code, fatal, message),) = errors(wire)
    assert (code, fatal) == ("model_call_retry", False)
    assert "vLLM request failed: EngineGenerateError" in message
    assert "caused by RuntimeError: CUDA error: an illegal memory access" in message
    assert [m["text"] for m in wire.of("response_final")] == ["A"]
    assert len(model_calls(wire)) == 2  # the failed attempt reached the model too
    assert adapter.readiness.ready


def test_generate_errors_past_the_retries_are_a_recorded_fatal_error(engine):
    adapter, _ = engine("generate,generate,generate", max_retries=2)
    wire = ask(adapter)
    codes = [(code, fatal) for code, fatal, _ in errors(wire)]
    assert codes == [
        ("model_call_retry", False),
        ("model_call_retry", False),
        ("model_call_failed", True),
    ]
    assert errors(wire)[-1][2].startswith("model call failed 3 times, giving up: vLLM request")
    assert wire.of("response_final") == []
    assert adapter.readiness.ready  # one request failing leaves the engine usable


def test_a_dead_engine_is_fatal_and_the_adapter_takes_no_more_sessions(engine):
    adapter, log = engine("dead")
    wire = ask(adapter)
    ((code, fatal, message),) = errors(wire)
    assert (code, fatal) == ("model_call_refused", True)
    assert message.startswith("the vLLM engine died (EngineDeadError: EngineCore encountered")
    assert message.endswith("; the adapter takes no more sessions")
    assert adapter.readiness.state == "failed"
    assert adapter.readiness.reason.startswith("the vLLM engine died")
    # A later call does not reach the engine at all.
    again = ask(adapter)
    ((code, fatal, message),) = errors(again)
    assert (code, fatal) == ("model_call_refused", True)
    assert message.startswith("the vLLM engine is unusable: the vLLM engine died")
    assert model_calls(again) == []
    assert len(log_entries(log, "call")) == 1


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("rejected", "vLLM rejected the prompt: ValueError: The decoder prompt (length 99999)"),
        ("invalid", "vLLM rejected the prompt: VLLMValidationError: temperature must be"),
    ],
)
def test_a_rejected_prompt_is_not_retried(engine, script, expected):
    adapter, log = engine(script)
    wire = ask(adapter)
    ((code, fatal, message),) = errors(wire)
    assert (code, fatal) == ("model_call_refused", True)
    assert message.startswith(expected)
    assert len(log_entries(log, "call")) == 1
    assert adapter.readiness.ready


def test_more_images_than_the_engine_allows_is_a_rejected_prompt(engine):
    # The engine's own limit (here the stand-in's check), not the adapter's: a mismatch
    # shows as a clear refusal rather than a crash.
    adapter, _ = engine(qa_max_frames=2, proactive_window_frames=1)
    adapter._engine_args.limit_mm_per_prompt["image"] = 1
    wire = ask(adapter)
    ((code, fatal, message),) = errors(wire)
    assert (code, fatal) == ("model_call_refused", True)
    assert "At most 1 image(s)" in message


def test_a_busy_engine_and_a_stalled_request_are_retried(engine):
    adapter, log = engine("busy,hang", output_timeout_s=0.3, max_retries=2)
    wire = ask(adapter)
    messages = [message for _, _, message in errors(wire)]
    assert [(c, f) for c, f, _ in errors(wire)] == [("model_call_retry", False)] * 2
    assert "vLLM is busy: QueueOverflowError: Request queue full." in messages[0]
    assert "vLLM produced no output for 0.3s; the request was aborted" in messages[1]
    assert [m["text"] for m in wire.of("response_final")] == ["A"]
    assert [e["outcome"] for e in log_entries(log, "call")] == ["busy", "hang", "ok"]


# ------------------------------------------------------------------ served, through the Core


def qa_benchmark(root: Path, count: int) -> Path:
    records = [
        QA.model_copy(update={"record_id": f"t:qa:{i}", "source_id": f"t:qa:{i}"})
        for i in range(1, count + 1)
    ]
    return write_benchmark(root, records=records)


def run_core(
    url: str,
    tmp_path: Path,
    count: int,
    concurrency: int = 1,
    give_up_s: float = ALL_DOWN_GIVE_UP_S,
    keep_stopped: bool = False,
    **config,
):
    notices: list[str] = []
    run_config = RunConfig(
        benchmark=str(qa_benchmark(tmp_path / "bench", count)),
        endpoints=[EndpointConfig(url=url, concurrency=concurrency)],
        cache_dir=str(tmp_path / "cache"),
        tasks=["qa"],
        **config,
    )

    async def execute(store: Store):
        executor = RunExecutor(run_config, store, give_up_s=give_up_s)
        executor.notice = notices.append
        return await executor.execute(await executor.prepare())

    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        try:
            summary = asyncio.run(execute(store))
        except RunStopped as stopped:  # every endpoint out of rotation (issue 13 item 1)
            if not keep_stopped:
                raise
            summary = stopped
        events: dict[str, list] = {}
        for event in store.iter_events(summary.run_id):
            events.setdefault(event.session_id, []).append(event)
    return summary, events, notices


def healthz(url: str) -> tuple[int, str, float]:
    base = url.removesuffix("/ws").replace("ws://", "http://")
    started = time.monotonic()
    response = httpx.get(f"{base}/healthz", timeout=5)
    return response.status_code, response.text.strip(), time.monotonic() - started


def test_a_slow_start_keeps_serving_and_no_session_is_lost(stand_in, tiny_model, tmp_path):
    # The load blocks longer than a heartbeat timeout; it runs off the event loop.
    load_s = HEARTBEAT_TIMEOUT_S + 4
    log = stand_in(load_s=str(load_s))
    options = {"model": str(tiny_model), "max_tokens_qa": 4}
    with AdapterProcess("vllm", options=options) as served:
        listening = time.monotonic()
        status, body, took = healthz(served.url)
        assert (status, body) == (503, "loading") and took < 2

        async def early_session():
            # Straight at the socket, not through the run's wait: refused as not ready...
            with pytest.raises(SessionFailure) as refused:
                await connect_adapter(served.url, 5, ready_timeout_s=0)
            assert "refused the session: not_ready: adapter vllm is still loading" in str(
                refused.value.reason
            )
            # ...and, given time, waited for until it is ready.
            ws = await connect_adapter(served.url, 5, ready_timeout_s=120)
            first: asyncio.Future[str] = asyncio.get_running_loop().create_future()

            def arrived(raw: object, _arrived_ns: int) -> None:
                if not first.done():
                    first.set_result(str(raw))

            ws.deliver_to(arrived, lambda _closed: None)
            hello = json.loads(await asyncio.wait_for(first, 10))
            await ws.close()
            return hello, time.monotonic()

        hello, connected = asyncio.run(early_session())
        assert hello["type"] == "hello"
        assert connected - listening >= load_s - 3
        summary, events, notices = run_core(served.url, tmp_path, count=2, concurrency=2)
    assert (summary.finished, summary.failed) == (2, 0)
    for session in events.values():
        finals = [e for e in session if e.kind == EventKind.RESPONSE_FINAL]
        assert [f.payload.model_dump()["text"] for f in finals] == ["A"]
    (built,) = log_entries(log, "built")
    assert built["thread"] == "vllm-load" and built["in_loop"] is False


def test_the_run_waits_for_a_loading_adapter_with_a_progress_line(stand_in, tiny_model, tmp_path):
    stand_in(load_s="6")
    options = {"model": str(tiny_model), "max_tokens_qa": 4}
    with AdapterProcess("vllm", options=options) as served:
        assert healthz(served.url)[:2] == (503, "loading")
        summary, _, notices = run_core(served.url, tmp_path, count=1)
        assert healthz(served.url)[:2] == (200, "ok")
    assert (summary.finished, summary.failed) == (1, 0)
    assert notices[0].startswith(f"waiting for adapter at {served.url}: loading (0s of 600s)")
    assert notices[-1].startswith(f"adapter at {served.url} is ready (waited ")


def test_a_run_gives_up_on_an_adapter_that_stays_loading(stand_in, tiny_model, tmp_path):
    stand_in(load_s="60")
    options = {"model": str(tiny_model)}
    with AdapterProcess("vllm", options=options) as served, pytest.raises(RunError) as refused:
        run_core(served.url, tmp_path, count=1, adapter_ready_timeout_s=1.5)
    assert str(refused.value) == (
        f"adapter at {served.url} was not ready within 1.5s (/healthz: loading); give it "
        "longer with --adapter-ready-timeout"
    )


def test_a_failed_load_is_reported_then_the_adapter_exits(stand_in, tiny_model, tmp_path):
    stand_in(load_error="CUDA out of memory")
    process = subprocess.Popen(
        [sys.executable, "-m", "streameval.adapters", "vllm", "--port", "0"]
        + ["-A", f"model={tiny_model}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        line = process.stdout.readline()
        url = line.split()[-1]  # the listening line ends with the session URL
        reason = "the vLLM engine did not start: RuntimeError: CUDA out of memory"
        with pytest.raises(RunError) as refused:
            run_core(url, tmp_path, count=1)
        assert str(refused.value) == f"adapter at {url} failed: {reason}"
        assert process.wait(timeout=30) == 1
        assert process.stderr.read().strip().splitlines()[-1] == (
            f"error: adapter vllm failed to start: {reason}"
        )
    finally:
        process.kill()
        process.wait()


def test_a_request_the_core_gave_up_on_is_aborted_within_a_second(stand_in, tiny_model, tmp_path):
    """The engine never answers (`output_timeout_s` is the default 300 s); the Core gives
    up after 1 s: the request is aborted at once (tests/test_vllm_lifecycle.py has the same
    without the model stack, the chat template stood in)."""
    log = stand_in(script="hang,hang,hang,hang")
    options = {"model": str(tiny_model), "max_tokens_qa": 4}
    with AdapterProcess("vllm", options=options) as served:
        _, events, _ = run_core(served.url, tmp_path, count=1, response_timeout_s=1.0)
        calls = log_entries(log, "call")
        deadline = time.monotonic() + 10
        while len(log_entries(log, "abort")) < len(calls):
            assert time.monotonic() < deadline, "a request was never aborted"
            time.sleep(0.05)
    (session,) = events.values()
    gave_up = [e.runtime_ns for e in session if e.kind == EventKind.SESSION_FAILED]
    aborts = log_entries(log, "abort")
    assert len(calls) == len(gave_up) >= 1
    assert [a["request_id"] for a in aborts] == [c["request_id"] for c in calls]
    for failed_ns, abort in zip(gave_up, aborts, strict=True):
        assert 0 <= abort["ns"] - failed_ns < 1_000_000_000


def test_engine_errors_reach_the_core_as_recorded_errors(stand_in, tiny_model, tmp_path):
    # Sessions one at a time, one call each: a retried generate error, a rejected prompt,
    # then a dead engine; the session after it is refused (the adapter is `failed`), which
    # takes the only endpoint out of rotation: the run stops with that session pending.
    stand_in(script="generate,ok,rejected,dead")
    options = {"model": str(tiny_model), "retry_backoff_s": 0, "max_tokens_qa": 4}
    with AdapterProcess("vllm", options=options) as served:
        stopped, events, notices = run_core(
            served.url, tmp_path, count=4, give_up_s=1.0, keep_stopped=True
        )
        status, body, _ = healthz(served.url)
    assert (status, body.split(" (")[0]) == (503, "failed: the vLLM engine died")
    assert isinstance(stopped, RunStopped)
    assert "every adapter endpoint has been unreachable for 1s" in str(stopped)
    assert any("refused the session: not_ready: adapter vllm failed" in n for n in notices)
    by_outcome = {}
    for session_id, session in events.items():
        errors_sent = [
            (e.payload.model_dump()["code"], e.payload.model_dump()["fatal"])
            for e in session
            if e.kind == EventKind.ADAPTER_ERROR
        ]
        failed = [e.payload.model_dump() for e in session if e.kind == EventKind.SESSION_FAILED]
        by_outcome[session_id] = (errors_sent, failed[0] if failed else None)
    outcomes = sorted(by_outcome.values(), key=lambda o: (o[1] is not None, str(o)))
    finished, *failures = outcomes
    assert finished == ([("model_call_retry", False)], None)
    kinds = sorted((errors_sent, f["cause"], f["stage"]) for errors_sent, f in failures)
    assert kinds == sorted(
        [
            ([("model_call_refused", True)], "adapter", failures[0][1]["stage"]),
            ([("model_call_refused", True)], "adapter", failures[0][1]["stage"]),
        ]
    )  # the refused session's attempt was discarded: it waits, pending, for a resume
    reasons = " | ".join(f["reason"] for _, f in failures)
    assert "vLLM rejected the prompt" in reasons
    assert "the vLLM engine died" in reasons


def test_video_mode_submits_the_window_as_one_video_with_its_fps(engine):
    adapter, log = engine(input_mode="video", max_tokens_qa=4)
    assert adapter.engine_kwargs["limit_mm_per_prompt"] == {"image": 16, "video": 1}
    wire = ask(adapter, frames=3)
    assert errors(wire) == []
    assert [m["text"] for m in wire.of("response_final")] == ["A"]
    (call,) = model_calls(wire)
    assert call["images"] == 3  # every frame of the video counts as a submitted image
    (entry,) = log_entries(log, "call")
    assert entry["images"] == 0
    assert entry["video"]["shape"] == [3, 48, 64, 3]
    metadata = entry["video"]["metadata"]
    assert (metadata["fps"], metadata["total_num_frames"]) == (1.0, 3)
    assert metadata["frames_indices"] == [0, 1, 2]
    assert entry["mm_processor_kwargs"] == {"fps": 1.0, "do_sample_frames": False}


def test_sampling_params_carry_the_generation_options(engine):
    """Set options reach vLLM's SamplingParams; unset ones keep vLLM's defaults (greedy at
    the adapter's temperature 0, no penalty), as before the options existed."""
    adapter, log = engine(max_tokens_qa=4)
    assert errors(ask(adapter)) == []
    options = {"top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "stop": ["\n"]}
    adapter, _ = engine(max_tokens_qa=4, temperature=0.7, seed=3, **options)
    assert errors(ask(adapter)) == []
    default, chosen = log_entries(log, "call")  # one log, both adapters' calls
    assert default["sampling"] == {
        "max_tokens": 4,
        "temperature": 0.0,
        "seed": 0,
        "top_p": 1.0,
        "top_k": 0,
        "repetition_penalty": 1.0,
        "stop": None,
    }
    assert chosen["sampling"] == {"max_tokens": 4, "temperature": 0.7, "seed": 3, **options}

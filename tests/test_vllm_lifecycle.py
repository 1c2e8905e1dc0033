"""The `vllm` adapter's engine lifecycle without a model stack (no torch): a call the session
abandons aborts its engine request at once, readiness follows the engine's health, and code
from the model's repository runs only when `trust_remote_code` says so.

The engine is the stand-in `vllm` package (tests/stand_in_vllm), whose `generate` is an async
generator that logs when it is cancelled or closed and whose `abort` logs each call, with
the host's monotonic clock (the Core records its events on the same clock). Served tests run
the real adapter in its own process (tests/vllm_stand_in.py: only the chat template is a
stand-in) against a real Core run.
"""

from __future__ import annotations

import asyncio
import sys
import time
import types

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from streameval.adapters.config import PRESET_DIR, AdapterConfigError, load_config, preset_names
from streameval.adapters.registry import load_adapter, preset_adapters
from streameval.adapters.sdk import Responder, Session
from streameval.adapters.vllm_engine import VLLMEngineConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import Question
from tests.faults import wait_for
from tests.test_core_run import execute, run_config
from tests.test_protocol import CONDITIONS
from tests.timeline_fixtures import QA, write_benchmark
from tests.vllm_stand_in import StandInVLLMAdapter, log_entries

SERVED = "tests.vllm_stand_in:StandInVLLMAdapter"
QUESTION = Question(task_id="q", t=1.0, text="Which?", options=["A. a", "B. b"])


# ------------------------------------------------------------------ trust_remote_code


class _RecordingAuto:
    """transformers' AutoProcessor / AutoTokenizer, recording how they were asked."""

    def __init__(self, calls: list[tuple[str, dict]], name: str) -> None:
        self.calls, self.name = calls, name

    def from_pretrained(self, model: str, **kwargs):
        self.calls.append((self.name, kwargs))
        return types.SimpleNamespace(chat_template="{{ messages }}")


@pytest.mark.parametrize("trusted", [False, True])
def test_remote_code_runs_in_the_engine_and_the_processor_only_when_configured(
    trusted, stand_in, monkeypatch
):
    log = stand_in()
    calls: list[tuple[str, dict]] = []
    fake = types.ModuleType("transformers")
    fake.AutoProcessor = _RecordingAuto(calls, "processor")
    fake.AutoTokenizer = _RecordingAuto(calls, "tokenizer")
    monkeypatch.setitem(sys.modules, "transformers", fake)
    options = {"model": "m"} if not trusted else {"model": "m", "trust_remote_code": True}
    adapter = load_adapter("vllm", options)
    assert adapter.engine_kwargs["trust_remote_code"] is trusted
    adapter._load()  # what `start` runs in its thread: the processor, then the engine
    assert calls == [("processor", {"trust_remote_code": trusted})]
    (built,) = log_entries(log, "built")
    assert built["args"]["trust_remote_code"] is trusted


def test_remote_code_is_one_option_not_an_engine_arg_too(stand_in):
    stand_in()
    with pytest.raises(AdapterConfigError) as raised:
        load_adapter("vllm", {"model": "m", "engine_args": {"trust_remote_code": True}})
    assert str(raised.value) == (
        "engine_args.trust_remote_code conflicts with the option trust_remote_code; give it once"
    )


@pytest.mark.parametrize("preset", [p for p in preset_names() if "vllm" in preset_adapters(p)])
def test_no_preset_runs_remote_code_and_those_whose_model_needs_it_say_so(preset):
    """A preset never turns remote code on for the in-process engine; a model whose server
    needs `--trust-remote-code` says, in its preset, what that means here."""
    config = load_config("vllm", VLLMEngineConfig, preset)
    assert config.trust_remote_code is False
    text = (PRESET_DIR / f"{preset}.yaml").read_text()
    if "--trust-remote-code" in text:
        assert "-A trust_remote_code=true" in text


# ------------------------------------------------------------------ cancellation, in process


def _adapter(**options) -> StandInVLLMAdapter:
    return StandInVLLMAdapter(VLLMEngineConfig(model="m", retry_backoff_s=0, **options))


async def _answer_until(adapter, send, began) -> asyncio.Task:
    """Ask the question in a task; return it once `began()` holds."""
    session = Session("run", "s", ["r"], CONDITIONS, send)
    await adapter.start()
    await adapter.on_session_start(session)
    task = asyncio.create_task(adapter.on_question(session, QUESTION, Responder(send, "q")))
    while not began():
        await asyncio.sleep(0.01)
    return task


def test_a_call_cancelled_while_the_engine_computes_aborts_its_request(stand_in):
    log = stand_in(script="hang")
    sent: list[str] = []

    async def sending(text: str) -> None:
        sent.append(text)

    async def go() -> None:
        adapter = _adapter()
        task = await _answer_until(adapter, sending, lambda: log_entries(log, "call"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert [e["request_id"] for e in log_entries(log, "abort")] == ["se-0"]
    assert [e["request_id"] for e in log_entries(log, "closed")] == ["se-0"]
    assert sent == []  # no workload, no error: the abandoned call reports nothing


def test_a_call_cancelled_while_its_answer_goes_out_aborts_its_request(stand_in):
    """The engine's generator is suspended at a `yield` (the answer's first piece is being
    sent when the hook is cancelled): it is closed and the request aborted all the same."""
    log = stand_in(reply="AB")
    blocked = asyncio.Event()

    async def stalling(text: str) -> None:
        if '"response_delta"' in text:
            blocked.set()
            await asyncio.sleep(3600)

    async def go() -> None:
        adapter = _adapter()
        task = await _answer_until(adapter, stalling, blocked.is_set)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Before anything else runs: not left to the generator's garbage collection.
        assert [e["request_id"] for e in log_entries(log, "abort")] == ["se-0"]
        assert [e["request_id"] for e in log_entries(log, "closed")] == ["se-0"]

    asyncio.run(go())


# ------------------------------------------------------------------ served, through the Core


def test_the_engine_request_is_aborted_within_a_second_of_the_core_giving_up(
    adapter_env, stand_in, tmp_path
):
    """The engine never answers (`output_timeout_s` is the default 300 s); the Core gives
    up after 1 s and closes the connection: the request is aborted at once."""
    log = stand_in(script="hang,hang,hang,hang")
    benchmark = write_benchmark(tmp_path / "bench", records=(QA,))
    with (
        AdapterProcess(SERVED, options={"model": "m"}) as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark, tmp_path, adapter.url, response_timeout_s=1.0)
        summary = execute(config, store)
        events = list(store.iter_events(summary.run_id))
        calls = log_entries(log, "call")
        wait_for(lambda: len(log_entries(log, "abort")) == len(calls), 10, "the aborts")
    failures = [e for e in events if e.kind == EventKind.SESSION_FAILED]
    assert {e.payload.reason for e in failures} == {"no answer within 1s"}
    gave_up = [e.runtime_ns for e in failures]
    aborts = log_entries(log, "abort")
    assert len(calls) == len(gave_up) >= 1  # one call per attempt, none retried
    assert [a["request_id"] for a in aborts] == [c["request_id"] for c in calls]
    for failed_ns, abort in zip(gave_up, aborts, strict=True):
        assert 0 <= abort["ns"] - failed_ns < 1_000_000_000
    assert [e for e in events if e.kind == EventKind.WORKLOAD] == []


# ------------------------------------------------------------------ readiness


def _healthz(port: int) -> tuple[int, str]:
    response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    return response.status_code, response.text.strip()


async def _refused(url: str) -> tuple[int, str]:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url):
            pass
    response = refused.value.response
    return response.status_code, response.body.decode().strip()


def test_readiness_follows_the_engines_health(adapter_env, stand_in, tmp_path):
    dead = tmp_path / "engine-dead"
    stand_in(dead_file=str(dead))
    options = {"model": "m", "health_interval_s": 0.2}
    with AdapterProcess(SERVED, options=options) as adapter:
        wait_for(lambda: _healthz(adapter.port)[0] == 200, 30, "the engine to load")
        assert _healthz(adapter.port) == (200, "ok")
        dead.touch()  # the engine core process is gone
        died = time.monotonic()
        wait_for(lambda: _healthz(adapter.port)[0] == 503, 10, "readiness to follow")
        noticed_s = time.monotonic() - died
        status, body = _healthz(adapter.port)
        refusal = asyncio.run(_refused(adapter.url))
    reason = "the vLLM engine died (EngineDeadError: EngineCore encountered an issue."
    assert status == 503 and body.startswith(f"failed: {reason}")
    assert refusal[0] == 503
    assert refusal[1].startswith(f"not_ready: adapter vllm failed and takes no sessions: {reason}")
    assert noticed_s < 5  # polled every 0.2 s; generous on a loaded machine

"""Limits (docs/security.md): one response's deltas and bytes, reported counts, fps and
speed ranges; and scoring that stays linear in the number of deltas of an answer.

Adapters that break a limit run as real processes over real sockets; every broken limit
fails only its own session, with one line naming the limit, and what came before is kept.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from pydantic import ValidationError

from streameval.adapters.sdk import Adapter, Responder, Session
from streameval.core.benchmark.records import QARecord
from streameval.core.config import (
    MAX_FPS,
    MAX_RESPONSE_BYTES,
    MAX_RESPONSE_DELTAS,
    MAX_SPEED,
    MIN_FPS,
    MIN_SPEED,
    EndpointConfig,
    RunConfig,
)
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.session.protocol_state import ResponseLimits
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import MAX_COUNT, MAX_TEXT_CHARS, AdapterConditions, Question
from streameval.scorer.episodes import assemble_one
from streameval.scorer.eventlog import SessionLog, memory_source
from streameval.scorer.report import evaluate_source, scores_of
from tests.test_core_run import execute, run_config

_POLLED = AdapterConditions(state="native", initiation="polled", model_name="test")
N_DELTAS = 100_000
EVENT_FLOOD = 5_000  # workload reports the flooding session sends
SESSION_EVENT_CAP = 1_000  # far above a normal session here, far below the flood


# --------------------------------------------------------------------------- adapters


class _RawAnswer(Adapter):
    """Answers every question with raw messages (the SDK would refuse some of them)."""

    conditions = _POLLED

    def messages(self, response_id: str) -> list[dict]:
        raise NotImplementedError

    async def on_question(self, session: Session, question: Question, respond: Responder):
        start = {"type": "response_start", "response_id": "r", "task_id": question.task_id}
        await session.send(json.dumps(start))
        for message in self.messages("r"):
            await session.send(json.dumps({"response_id": "r", **message}, ensure_ascii=False))


class FloodingAdapter(_RawAnswer):
    """One more delta than a response may stream."""

    name = "flooding"

    def messages(self, response_id: str) -> list[dict]:
        deltas = [
            {"type": "response_delta", "seq": seq, "text": "x"}
            for seq in range(MAX_RESPONSE_DELTAS + 1)
        ]
        return [*deltas, {"type": "response_final", "text": "x"}]


class HeavyAdapter(_RawAnswer):
    """Deltas of 200,000 four-byte characters (800 KB each): the sixth passes 4 MiB."""

    name = "heavy"

    def messages(self, response_id: str) -> list[dict]:
        text = "\U0001f600" * MAX_TEXT_CHARS
        deltas = [{"type": "response_delta", "seq": seq, "text": text} for seq in range(6)]
        return [*deltas, {"type": "response_final", "text": "B"}]


class NegativeTokensAdapter(_RawAnswer):
    name = "negative-tokens"

    def messages(self, response_id: str) -> list[dict]:
        return [{"type": "response_final", "text": "B", "output_tokens": -5}]


class HugeWorkloadAdapter(Adapter):
    """Reports a model call of 10^40 input tokens, then answers."""

    name = "huge-workload"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        workload = {"type": "workload", "kind": "model_call", "input_tokens": 10**40}
        await session.send(json.dumps(workload))
        await respond.say("B")


class EventFloodAdapter(Adapter):
    """The first question it gets (one session of the run) is answered after a flood of
    workload reports, each a recorded event; every other question is answered at once."""

    name = "event-flood"
    conditions = _POLLED
    flooded = False  # per adapter process

    async def on_question(self, session: Session, question: Question, respond: Responder):
        if not EventFloodAdapter.flooded:
            EventFloodAdapter.flooded = True
            workload = json.dumps({"type": "workload", "kind": "model_call", "input_tokens": 1})
            for _ in range(EVENT_FLOOD):
                await session.send(workload)
        await respond.say("B")


# --------------------------------------------------------------------------- Core limits


@pytest.mark.parametrize(
    ("adapter", "reason", "deltas_kept"),
    [
        (
            "FloodingAdapter",
            f"response_too_large: response r sent more than {MAX_RESPONSE_DELTAS} deltas "
            "(max_response_deltas)",
            MAX_RESPONSE_DELTAS,
        ),
        (
            "HeavyAdapter",
            f"response_too_large: response r streamed more than {MAX_RESPONSE_BYTES} bytes of "
            "text (max_response_bytes)",
            5,
        ),
    ],
)
def test_a_response_over_its_limits_fails_its_session_and_keeps_what_came_before(
    adapter, reason, deltas_kept, adapter_env, benchmark_path, tmp_path
):
    with (
        AdapterProcess(f"tests.test_limits:{adapter}") as served,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark_path, tmp_path, served.url, tasks=["qa"], limit=1)
        summary = execute(config, store)
        (session,) = store.sessions(summary.run_id)
        assert (session.status, session.failure_reason, session.failure_cause) == (
            "failed",
            reason,
            "adapter",
        )
        kinds = [e.kind for e in store.iter_events(summary.run_id, session.session_id)]
    # Every delta up to the limit is recorded, none after it; the run went on to its end.
    assert kinds.count(EventKind.RESPONSE_DELTA) == deltas_kept
    assert EventKind.RESPONSE_FINAL not in kinds and kinds[-1] == EventKind.SESSION_FAILED
    assert summary.status == "failed"


@pytest.mark.parametrize(
    ("adapter", "reason"),
    [
        ("NegativeTokensAdapter", "malformed: response_final.output_tokens is negative"),
        (
            "HugeWorkloadAdapter",
            f"malformed: workload.input_tokens is above its limit {MAX_COUNT}",
        ),
    ],
)
def test_an_impossible_count_is_a_protocol_error_of_its_session(
    adapter, reason, adapter_env, benchmark_path, tmp_path
):
    with (
        AdapterProcess(f"tests.test_limits:{adapter}") as served,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark_path, tmp_path, served.url, tasks=["qa"], limit=1)
        summary = execute(config, store)
        (session,) = store.sessions(summary.run_id)
        assert (session.status, session.failure_reason) == ("failed", reason)
        kinds = [e.kind for e in store.iter_events(summary.run_id, session.session_id)]
    # The message carrying the count is refused, not recorded.
    assert EventKind.WORKLOAD not in kinds and EventKind.RESPONSE_FINAL not in kinds


def test_a_session_over_its_event_cap_fails_alone_and_keeps_what_came_before(
    adapter_env, benchmark_path, tmp_path
):
    with (
        AdapterProcess("tests.test_limits:EventFloodAdapter") as served,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(
            benchmark_path,
            tmp_path,
            served.url,
            tasks=["qa"],
            limit=3,
            max_session_events=SESSION_EVENT_CAP,
        )
        summary = execute(config, store)
        sessions = store.sessions(summary.run_id)
        failed = [s for s in sessions if s.status == "failed"]
        finished = [s for s in sessions if s.status == "finished"]
        assert (len(failed), len(finished)) == (1, len(sessions) - 1) and finished
        (flooded,) = failed
        assert (flooded.failure_stage, flooded.failure_reason, flooded.failure_cause) == (
            "protocol",
            f"too_many_events: the adapter sent more than {SESSION_EVENT_CAP} recorded "
            "messages in this session (max_session_events)",
            "adapter",
        )
        events = list(store.iter_events(summary.run_id, flooded.session_id))
    # Every adapter message up to the cap is recorded, the one past it is not, and the
    # answer after the flood never arrives.
    kinds = [e.kind for e in events]
    adapter_kinds = {
        EventKind.ADAPTER_HELLO,
        EventKind.FRAME_ACK,
        EventKind.WORKLOAD,
        EventKind.RESPONSE_START,
        EventKind.RESPONSE_DELTA,
        EventKind.RESPONSE_FINAL,
        EventKind.SILENT,
        EventKind.ADAPTER_ERROR,
    }
    assert sum(kind in adapter_kinds for kind in kinds) == SESSION_EVENT_CAP
    assert EventKind.RESPONSE_FINAL not in kinds and kinds[-1] == EventKind.SESSION_FAILED


def test_response_limits_are_the_configs():
    config = RunConfig(benchmark="synthetic", endpoints=[EndpointConfig(url="ws://a:1/ws")])
    assert (config.max_response_deltas, config.max_response_bytes) == (20_000, 4 * 1024 * 1024)
    assert config.max_session_events == 1_000_000
    assert ResponseLimits() == ResponseLimits(
        config.max_response_deltas, config.max_response_bytes, config.max_session_events
    )
    with pytest.raises(ValidationError):
        RunConfig(
            benchmark="synthetic",
            endpoints=[EndpointConfig(url="ws://a:1/ws")],
            max_session_events=0,
        )


# --------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("fps", 1e9, "fps: Input should be less than or equal to 60"),
        ("fps", 0.0, "fps: Input should be greater than or equal to 0.01"),
        ("speed", 1e-300, "speed: Input should be greater than or equal to 0.01"),
        ("speed", 1e300, "speed: Input should be less than or equal to 1000"),
    ],
)
def test_fps_and_speed_have_ranges(option, value, message):
    assert (MIN_FPS, MAX_FPS, MIN_SPEED, MAX_SPEED) == (0.01, 60, 0.01, 1000)
    with pytest.raises(ValidationError) as caught:
        RunConfig(
            benchmark="synthetic",
            endpoints=[EndpointConfig(url="ws://a:1/ws")],
            **{option: value},
        )
    first = caught.value.errors()[0]
    assert f"{first['loc'][0]}: {first['msg']}" == message


@pytest.mark.parametrize(("option", "value"), [("--fps", "1e9"), ("--speed", "1e-300")])
def test_the_cli_refuses_an_out_of_range_fps_or_speed_in_one_line(option, value, tmp_path):
    done = subprocess.run(
        [
            sys.executable, "-m", "streameval.cli", "run", "--store",
            f"sqlite:///{tmp_path / 's.db'}", "--cache-dir", str(tmp_path / "cache"),
            "--adapter-url", "ws://127.0.0.1:9/ws",
            option, value,
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and option.removeprefix("--") in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    # Nothing was created: no JPEG written, no run stored.
    assert not list(tmp_path.rglob("*.jpg"))


# --------------------------------------------------------------------------- scoring


def _record() -> QARecord:
    return QARecord(
        record_id="q1",
        source_id="v1",
        source_benchmark="synthetic",
        task_type="OCR",
        video_path="v1.mp4",
        question="Which?",
        options=("A. a", "B. b"),
        answer="B",
        question_time_s=2.0,
        evidence_anchor_s=1.0,
    )


def _streamed(close: bool) -> SessionLog:
    """The answer "B x x ...", streamed as N_DELTAS deltas."""
    log = SessionLog("run", "q1").start()
    for t in (0.0, 1.0, 2.0):
        log.frame(t)
    log.question(_record())
    deltas = ["B", *(" x" for _ in range(N_DELTAS - 1))]
    log.respond("".join(deltas), deltas=deltas, close=close)
    log.finish() if close else log.fail(stage="streaming", reason="adapter crashed")
    return log


def test_an_answer_of_100000_deltas_is_assembled_in_one_pass():
    """The text is built once, from the parts: every character copied once (the old code
    copied the whole text again at every delta, 10^10 characters for this answer)."""
    unclosed = assemble_one("q1", _streamed(close=False).rows()).episodes[-1]
    length = 1 + 2 * (N_DELTAS - 1)
    assert (unclosed.closed, len(unclosed.text), unclosed.copied_chars) == (False, length, length)
    assert unclosed.text.startswith("B x x") and unclosed.parts == []
    # A closed answer's text is its final's: nothing is joined at all.
    closed = assemble_one("q1", _streamed(close=True).rows()).episodes[-1]
    assert (closed.closed, len(closed.text), closed.copied_chars) == (True, length, 0)


def test_a_snapshot_replaces_the_parts_before_it():
    log = SessionLog("run", "q1").start()
    log.question(_record())
    response = log.respond("", deltas=["a", "b"], close=False)
    log._add(
        EventKind.RESPONSE_DELTA, None, None, response_id=response, seq=2, text="C", snapshot=True
    )
    log._add(
        EventKind.RESPONSE_DELTA, None, None, response_id=response, seq=3, text="d", snapshot=False
    )
    (episode,) = assemble_one("q1", log.rows()).episodes
    assert (episode.text, episode.copied_chars) == ("Cd", 2)


def test_a_stored_impossible_count_is_scored_as_missing():
    """A log recorded before the Core checked counts (or imported) still averages none."""
    log = SessionLog("run", "q1").start()
    log.question(_record())
    log.workload(kind="model_call", input_tokens=-7)
    log.respond("B", output_tokens=10**40, input_tokens=-1)
    log.finish()
    trace = assemble_one("q1", log.rows())
    (episode,) = trace.episodes
    assert (episode.output_tokens, episode.input_tokens, trace.workload.input_tokens) == (
        None,
        None,
        None,
    )
    scores = scores_of(evaluate_source(memory_source([_record()], [log]), "trace-paper-v1"))
    workload = scores.overall["workload"]
    assert (workload["output_tokens"].value, workload["input_tokens"].value) == (None, None)


def test_a_run_with_an_answer_of_100000_deltas_scores():
    """End to end through the scorer (its speed is bench/'s business, not a test's)."""
    source = memory_source([_record()], [_streamed(close=True)])
    scores = scores_of(evaluate_source(source, "trace-paper-v1"))
    assert scores.overall["qa"]["accuracy"].value == 1.0

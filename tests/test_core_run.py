"""The Core end to end: real adapter processes over WebSocket, a real video, a real store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.errors import RunError, RunStopped
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.events import EventKind


def run_config(benchmark_path: Path, tmp_path: Path, url: str, **overrides) -> RunConfig:
    return RunConfig(
        benchmark=str(benchmark_path),
        endpoints=[EndpointConfig(url=url, concurrency=overrides.pop("concurrency", 2))],
        cache_dir=str(tmp_path / "cache"),
        **overrides,
    )


def execute(config: RunConfig, store: Store):
    async def go():
        executor = RunExecutor(config, store)
        return await executor.execute(await executor.prepare())

    return asyncio.run(go())


def adapter_log(log_dir: Path, session_id: str) -> list[dict]:
    path = log_dir / f"{session_id}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def events_by_session(store: Store, run_id: str) -> dict[str, list]:
    grouped: dict[str, list] = {}
    for event in store.iter_events(run_id):
        grouped.setdefault(event.session_id, []).append(event)
    return grouped


def seen_by_adapter(log: list[dict]) -> list[tuple[str, float | None]]:
    return [(entry["kind"], entry["t"]) for entry in log if entry["kind"] != "session_start"]


# ------------------------------------------------------------------ causality


@pytest.mark.parametrize("pacing", ["logical", "wall_clock"])
def test_nothing_from_the_future_reaches_the_adapter(pacing, adapter_env, benchmark_path, tmp_path):
    with (
        AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark_path, tmp_path, adapter.url, pacing=pacing, speed=8.0)
        summary = execute(config, store)
        assert (summary.finished, summary.failed) == (3, 0)
        events = events_by_session(store, summary.run_id)

        def delivered(session_id: str, expected: list[tuple[str, float]]) -> None:
            """The adapter saw exactly `expected`, less the frames the Core recorded as
            dropped: wall-clock pacing skips a frame whose successor is already due, which a
            loaded machine can make happen (logical pacing never drops one)."""
            dropped = {
                ("frame", e.payload.t)
                for e in events[session_id]
                if e.kind == EventKind.FRAME_DROPPED
            }
            assert pacing == "wall_clock" or not dropped
            seen = seen_by_adapter(adapter_log(adapter_env, session_id))
            assert seen == [item for item in expected if item not in dropped]

        # QA, anchor 15 s, question 17 s: frames 5..17 s (anchor - 10 s), then the question.
        delivered("t:qa:1", [("frame", float(t)) for t in range(5, 18)] + [("question", 17.0)])
        # Question at 6.4 s, anchor 3 s: history clipped at 0; the 6 s frame is the last legal.
        delivered("t:qa:2", [("frame", float(t)) for t in range(0, 7)] + [("question", 6.4)])
        # Proactive: instruction at 4 s (frames from 4 - 5 s), a step after every frame from
        # then on, up to the last window end 12 + 5 = 17 s.
        expected = [("frame", float(t)) for t in range(0, 4)]
        expected += [("frame", 4.0), ("instruction", 4.0), ("step", 4.0)]
        for t in range(5, 18):
            expected += [("frame", float(t)), ("step", float(t))]
        delivered("t:pro:1", expected)

        if pacing == "wall_clock":
            # No frame arrived before its scheduled runtime (the clocks are the same
            # CLOCK_MONOTONIC: both processes run on this machine).
            for session_id in ("t:qa:1", "t:pro:1"):
                scheduled = [
                    e.payload.scheduled_ns
                    for e in events[session_id]
                    if e.kind == EventKind.FRAME_SENT
                ]
                arrivals = [
                    e["ns"] for e in adapter_log(adapter_env, session_id) if e["kind"] == "frame"
                ]
                assert len(scheduled) == len(arrivals)
                assert all(a >= s for a, s in zip(arrivals, scheduled, strict=True))


def test_recorded_events_tell_the_whole_story(adapter_env, benchmark_path, tmp_path, store_url):
    """A whole run on both store backends (SQLite file, real PostgreSQL server)."""
    with (
        AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter,
        Store(store_url) as store,
    ):
        summary = execute(run_config(benchmark_path, tmp_path, adapter.url), store)
        events = events_by_session(store, summary.run_id)["t:qa:1"]
    kinds = [e.kind for e in events]
    assert kinds[:2] == [EventKind.ADAPTER_HELLO, EventKind.SESSION_START]
    assert kinds.count(EventKind.FRAME_SENT) == 13
    assert kinds.count(EventKind.FRAME_ACK) == 13
    assert kinds[-2:] == [EventKind.SESSION_END, EventKind.SESSION_FINISHED]
    assert [e.seq for e in events] == list(range(len(events)))
    question = next(e for e in events if e.kind == EventKind.QUESTION_SENT)
    start = next(e for e in events if e.kind == EventKind.RESPONSE_START)
    final = next(e for e in events if e.kind == EventKind.RESPONSE_FINAL)
    assert question.payload.options == ["A. one", "B. two"]
    assert question.runtime_ns < start.runtime_ns <= final.runtime_ns
    assert final.payload.text == "A"
    assert start.video_t == 17.0


# ------------------------------------------------------------------ failures


def statuses(store: Store, run_id: str) -> dict[str, tuple[str, str | None]]:
    return {s.session_id: (s.status, s.failure_stage) for s in store.sessions(run_id)}


def test_killed_adapter_fails_its_session_and_the_run_stops_for_the_rest(
    adapter_env, benchmark_path, tmp_path
):
    """The adapter process dies mid-stream: that session fails (a task was delivered), the
    endpoint leaves the rotation, and with no endpoint left the run stops `interrupted`
    with the other sessions pending (issue 13 item 1), instead of failing them at connect."""
    with (
        AdapterProcess("tests.wire_adapters:CrashingAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark_path, tmp_path, adapter.url, concurrency=1)

        async def go():
            executor = RunExecutor(config, store, give_up_s=1.0)
            executor.notice = None
            return await executor.execute(await executor.prepare())

        with pytest.raises(RunStopped) as stopped:
            asyncio.run(go())
        run_id = stopped.value.run_id
        assert "every adapter endpoint has been unreachable for 1s" in str(stopped.value)
        assert store.get_run(run_id).status == "interrupted"
        stages = statuses(store, run_id)
        assert sorted(stages.values(), key=str) == sorted(
            [("failed", "streaming"), ("pending", None), ("pending", None)], key=str
        )
        failed = [e for e in store.iter_events(run_id) if e.kind == EventKind.SESSION_FAILED]
        assert len(failed) == 1
        assert {e.payload.cause for e in failed} == {"infrastructure"}
        streaming = failed[0]
        # What was recorded before the crash is kept.
        acks = [
            e
            for e in store.iter_events(run_id, streaming.session_id)
            if e.kind == EventKind.FRAME_ACK
        ]
        assert len(acks) > 0


def test_hung_adapter_times_out_and_the_run_finishes(adapter_env, benchmark_path, tmp_path):
    with (
        AdapterProcess("tests.wire_adapters:HangingAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(
            benchmark_path, tmp_path, adapter.url, concurrency=3, response_timeout_s=1.0
        )
        summary = execute(config, store)
        assert (summary.finished, summary.failed) == (0, 3)
        assert set(statuses(store, summary.run_id).values()) == {("failed", "response")}
        reasons = {s.failure_reason for s in store.sessions(summary.run_id)}
        assert reasons == {"no answer within 1s", "no decision at step 0 within 1s"}
        assert store.get_run(summary.run_id).status == "failed"
        causes = {s.failure_cause for s in store.sessions(summary.run_id)}
        assert causes == {"infrastructure"}


@pytest.mark.parametrize(
    ("adapter_name", "stage", "reason_start"),
    [
        ("GarbageAdapter", "protocol", "malformed"),
        ("OutOfOrderAdapter", "protocol", "out_of_order: response_delta for unopened response"),
        ("OversizedAdapter", "streaming", "adapter sent an oversized message"),
        ("EarlyAdapter", "protocol", "out_of_order: silent before any question, instruction"),
    ],
)
def test_protocol_violations_fail_the_session_cleanly(
    adapter_name, stage, reason_start, adapter_env, benchmark_path, tmp_path
):
    with (
        AdapterProcess(f"tests.wire_adapters:{adapter_name}") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(
            benchmark_path, tmp_path, adapter.url, tasks=["qa"], response_timeout_s=10.0
        )
        summary = execute(config, store)
        assert (summary.finished, summary.failed) == (0, 2)
        for session in store.sessions(summary.run_id):
            assert (session.status, session.failure_stage) == ("failed", stage)
            assert session.failure_reason.startswith(reason_start), session.failure_reason
            # A protocol violation (an oversized message included) is the adapter's doing.
            assert session.failure_cause == "adapter"
            kinds = [e.kind for e in store.iter_events(summary.run_id, session.session_id)]
            # Everything before the violation is kept: the frames sent and their acks (the
            # early adapter broke the protocol before acknowledging its first frame).
            sent, acked = kinds.count(EventKind.FRAME_SENT), kinds.count(EventKind.FRAME_ACK)
            assert sent > 0
            assert acked == (0 if adapter_name == "EarlyAdapter" else sent)
            assert kinds[-1] == EventKind.SESSION_FAILED


def test_profile_contradicting_adapter_conditions_is_refused(adapter_env, benchmark_path, tmp_path):
    with (
        AdapterProcess("tests.wire_adapters:AutonomousAdapter") as adapter,
        Store(f"sqlite:///{tmp_path / 's.db'}") as store,
    ):
        config = run_config(benchmark_path, tmp_path, adapter.url, profile="trace-autonomous")
        with pytest.raises(RunError, match="needs state in \\['native'\\].*'non-native'"):
            execute(config, store)
        assert store.list_runs() == []

"""A hook the Core abandoned is cancelled: when the Core gives up on a session (it closes the
connection) or the connection drops, the adapter's running hook (a model call) gets
`CancelledError` at once instead of running to its own timeout, nothing it sends after
that gets out, and the session's cleanup hook still runs to its end.

Real components: the adapter in its own process (tests.wire_adapters:AbandonedCallAdapter,
which logs with the host's monotonic clock, as the Core records its events), a real Core
run, or a raw WebSocket client that drops its TCP connection. The 1 s bound is generous:
the cancellation follows the close within one turn of the adapter's event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from streameval.adapters.inbox import HIGH_WATER
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.protocol import (
    FEATURES_HEADER,
    PROTOCOL_VERSION,
    RESUME_FEATURE,
    FrameHeader,
    Question,
    SessionEnd,
    SessionStart,
    encode_frame,
)
from tests.faults import wait_for
from tests.test_core_run import execute, run_config
from tests.test_protocol import CONDITIONS
from tests.timeline_fixtures import QA, write_benchmark

ADAPTER = "tests.wire_adapters:AbandonedCallAdapter"
BOUND_NS = 1_000_000_000
SESSION = "abandoned"
# What the Core waits for the adapter's close frame before it drops the connection.
CORE_CLOSE_TIMEOUT_S = 2.0


def adapter_log(log_dir: Path, session_id: str) -> list[dict]:
    path = log_dir / f"{session_id}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def kinds(log: list[dict]) -> list[str]:
    return [entry["kind"] for entry in log]


def at(log: list[dict], kind: str) -> list[int]:
    return [entry["ns"] for entry in log if entry["kind"] == kind]


def test_a_session_the_core_gives_up_on_cancels_the_running_call(adapter_env, tmp_path):
    benchmark = write_benchmark(tmp_path / "bench", records=(QA,))
    with AdapterProcess(ADAPTER) as adapter, Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        config = run_config(benchmark, tmp_path, adapter.url, response_timeout_s=1.0)
        summary = execute(config, store)
        (session,) = store.sessions(summary.run_id)
        events = list(store.iter_events(summary.run_id))
        # The cleanup awaits 0.2 s after the cancellation; wait for it to be logged.
        wait_for(lambda: "cleanup_done" in kinds(adapter_log(adapter_env, QA.record_id)), 10)
    assert (summary.finished, summary.failed) == (0, 1)
    assert (session.failure_stage, session.failure_reason) == ("response", "no answer within 1s")
    failed = [e.runtime_ns for e in events if e.kind == EventKind.SESSION_FAILED]
    log = adapter_log(adapter_env, QA.record_id)
    # One attempt per failure, each call cancelled, then the cleanup, in that order.
    assert len(failed) >= 1
    assert kinds(log) == [
        "call",
        "cancelled",
        "send_refused",
        "cleanup_begins",
        "cleanup_done",
    ] * len(failed)
    for gave_up, cancelled in zip(failed, at(log, "cancelled"), strict=True):
        assert 0 <= cancelled - gave_up < BOUND_NS
    # Nothing the cancelled hook tried to send was recorded.
    assert [e for e in events if e.kind == EventKind.WORKLOAD] == []


async def _start_session(ws) -> None:
    """Read the hello, start the session."""
    json.loads(await ws.recv())  # the hello
    start = SessionStart(
        protocol=PROTOCOL_VERSION,
        run_id="r",
        session_id=SESSION,
        record_ids=["q"],
        conditions=CONDITIONS,
    )
    await ws.send(start.model_dump_json())


async def _start_call(ws, log_dir: Path) -> None:
    """Start a session, ask a question, return once the adapter's call began."""
    await _start_session(ws)
    await ws.send(Question(task_id="q", t=0.0, text="Which?", options=[]).model_dump_json())
    deadline = time.monotonic() + 10
    while "call" not in kinds(adapter_log(log_dir, SESSION)):
        assert time.monotonic() < deadline, "the adapter never began its call"
        await asyncio.sleep(0.01)


async def _drop_during_call(url: str, log_dir: Path, resumable: bool) -> int:
    """Drop the TCP connection once the call began; returns when (monotonic ns)."""
    headers = {FEATURES_HEADER: RESUME_FEATURE} if resumable else {}
    async with connect(url, additional_headers=headers) as ws:
        await _start_call(ws, log_dir)
        dropped = time.monotonic_ns()
        ws.transport.abort()  # as a crashed Core or a broken network: no close frame
    return dropped


@pytest.mark.parametrize("resumable", [False, True], ids=["ends", "kept-for-resume"])
def test_a_dropped_connection_cancels_the_running_call(resumable, adapter_env):
    with AdapterProcess(ADAPTER) as adapter:
        dropped = asyncio.run(_drop_during_call(adapter.url, adapter_env, resumable))
        wait_for(lambda: "send_refused" in kinds(adapter_log(adapter_env, SESSION)), 10)
        if not resumable:
            wait_for(lambda: "cleanup_done" in kinds(adapter_log(adapter_env, SESSION)), 10)
        log = adapter_log(adapter_env, SESSION)
    (cancelled,) = at(log, "cancelled")
    assert 0 <= cancelled - dropped < BOUND_NS
    if resumable:
        # Kept for a resume (its grace is 600 s): the call is cancelled all the same, and
        # the session's state waits on the shelf, not yet cleaned up.
        assert kinds(log) == ["call", "cancelled", "send_refused"]
    else:
        assert kinds(log) == ["call", "cancelled", "send_refused", "cleanup_begins", "cleanup_done"]


async def _close_behind_queued_frames(url: str, log_dir: Path, frames: int) -> int:
    """Once the call began, send `frames` frames (they queue behind the hook, and past 16
    the adapter stops reading), then close as the Core does; returns when the close began."""
    async with connect(url, close_timeout=CORE_CLOSE_TIMEOUT_S, compression=None) as ws:
        await _start_call(ws, log_dir)
        for index in range(frames):
            header = FrameHeader(
                index=index, frame_id=f"f{index}", t=float(index), width=1, height=1, nbytes=64
            )
            await ws.send(encode_frame(header, bytes(64)))
        closing = time.monotonic_ns()
    return closing


def test_a_close_behind_unread_frames_still_cancels_the_running_call(adapter_env):
    """The adapter has stopped reading (back-pressure), so the Core's close waits unread:
    the adapter's probe sees the Core go within its close timeout, not at the heartbeat
    (40 s)."""
    with AdapterProcess(ADAPTER) as adapter:
        closing = asyncio.run(_close_behind_queued_frames(adapter.url, adapter_env, HIGH_WATER * 2))
        wait_for(lambda: "cleanup_done" in kinds(adapter_log(adapter_env, SESSION)), 30)
        log = adapter_log(adapter_env, SESSION)
    assert kinds(log) == ["call", "cancelled", "send_refused", "cleanup_begins", "cleanup_done"]
    (cancelled,) = at(log, "cancelled")
    bound_ns = int(CORE_CLOSE_TIMEOUT_S * 1e9) + BOUND_NS
    assert 0 <= cancelled - closing < bound_ns


async def _drop_during_cleanup(url: str, log_dir: Path) -> None:
    """End the session, then drop the connection while the adapter's cleanup runs."""
    async with connect(url) as ws:
        await _start_session(ws)
        await ws.send(SessionEnd().model_dump_json())
        deadline = time.monotonic() + 10
        while "cleanup_begins" not in kinds(adapter_log(log_dir, SESSION)):
            assert time.monotonic() < deadline, "the adapter never began its cleanup"
            await asyncio.sleep(0.01)
        ws.transport.abort()


def test_a_connection_dropped_during_the_cleanup_does_not_cut_it_short(adapter_env):
    with AdapterProcess(ADAPTER) as adapter:
        asyncio.run(_drop_during_cleanup(adapter.url, adapter_env))
        wait_for(lambda: "cleanup_done" in kinds(adapter_log(adapter_env, SESSION)), 10)
        time.sleep(0.5)  # a second cleanup would have begun by now
        log = adapter_log(adapter_env, SESSION)
    assert kinds(log) == ["cleanup_begins", "cleanup_done"]

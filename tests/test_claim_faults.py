"""Claims when a worker dies or stalls (issue 35, item 2), with real `streameval worker`
processes on PostgreSQL and a real adapter process: a SIGKILLed worker's session is redone
before any pending session, and a worker SIGSTOPped past its lease, then woken, counts its
session as `lost` (docs/scale.md), not `failed`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from streameval.core.config import EndpointConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.worker import Worker
from streameval.core.session.driver import SessionOutcome
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.store import SessionInfo, Store
from streameval.core.store.writer import EventWriter
from tests.conftest import _fresh_pg_database, pg_server_url
from tests.faults import wait_for
from tests.test_scale_out import SLOW, detached_run, worker

ONE_AT_A_TIME = ("--concurrency", "1")


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from _fresh_pg_database(pg_server_url())


def held_by(store: Store, run_id: str, process: subprocess.Popen) -> list[SessionInfo]:
    return [
        s
        for s in store.sessions(run_id)
        if s.status == "running" and s.worker_id.split(":")[1] == str(process.pid)
    ]


def expired(store: Store, run_id: str, session_id: str) -> bool:
    (session,) = [s for s in store.sessions(run_id) if s.session_id == session_id]
    return session.lease_expires_at is not None and session.lease_expires_at < store.clock()


def stop_between_transactions(process: subprocess.Popen, store: Store) -> None:
    """SIGSTOP the process while none of its transactions is open: a frozen transaction
    keeps its row locks, and claims skip locked rows until it wakes."""
    open_transactions = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state LIKE 'idle in transaction%'"
    )
    for _ in range(100):
        process.send_signal(signal.SIGSTOP)
        with store.transaction("open transactions") as conn:
            if conn.execute(open_transactions).scalar_one() == 0:
                return
        process.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("the worker was never stopped between transactions")


def test_a_killed_workers_session_is_redone_before_every_pending_one(pg_url):
    with AdapterProcess(SLOW) as adapter, Store(pg_url) as store:
        run_id = detached_run(pg_url, "--limit", "6")
        victim = worker(pg_url, run_id, adapter.url, 2.0, *ONE_AT_A_TIME)
        try:
            wait_for(lambda: held_by(store, run_id, victim), what="the first worker's claim")
            victim.send_signal(signal.SIGKILL)
        finally:
            victim.communicate(timeout=60)
        (killed,) = [s.session_id for s in store.sessions(run_id) if s.status == "running"]
        pending = {s.session_id for s in store.sessions(run_id) if s.status == "pending"}
        assert len(pending) >= 2  # it died early: most sessions wait
        wait_for(lambda: expired(store, run_id, killed), timeout_s=30, what="the lease's end")
        survivor = worker(pg_url, run_id, adapter.url, 60.0, *ONE_AT_A_TIME)
        out, err = survivor.communicate(timeout=180)
        assert survivor.returncode == 0, err
        sessions = {s.session_id: s for s in store.sessions(run_id)}
    assert json.loads(out)["claimed"] == len(pending) + 1
    assert {s.status for s in sessions.values()} == {"finished"}
    assert sessions[killed].attempt == 1
    # One slot claims one session at a time: the dead worker's came first.
    first = min(sessions.values(), key=lambda s: s.started_at)
    assert first.session_id == killed
    assert all(sessions[p].started_at > sessions[killed].started_at for p in pending)


def test_a_worker_woken_after_losing_its_lease_counts_the_session_lost(pg_url):
    """The stalled worker's adapter went away meanwhile, so on waking its session fails at
    once, before a renewal could say the lease is gone: it is still counted `lost`, its
    failure refused by the store."""
    with (
        AdapterProcess(SLOW) as its_adapter,
        AdapterProcess(SLOW) as adapter,
        Store(pg_url) as store,
    ):
        run_id = detached_run(pg_url, "--limit", "2")
        options = (*ONE_AT_A_TIME, "--max-sessions", "1")
        stale = worker(pg_url, run_id, its_adapter.url, 2.0, *options)
        wait_for(lambda: held_by(store, run_id, stale), what="the first worker's claim")
        stop_between_transactions(stale, store)
        try:
            (taken,) = held_by(store, run_id, stale)
            wait_for(lambda: expired(store, run_id, taken.session_id), timeout_s=30)
            other = worker(pg_url, run_id, adapter.url, 60.0, *ONE_AT_A_TIME)

            def retaken() -> bool:
                now = {s.session_id: s for s in store.sessions(run_id)}
                return now[taken.session_id].attempt == 1

            wait_for(retaken, what="the other worker's claim of the stalled session")
            its_adapter.kill()
        finally:
            stale.send_signal(signal.SIGCONT)
        stale_out, stale_err = stale.communicate(timeout=180)
        other_out, other_err = other.communicate(timeout=180)
        sessions = {s.session_id: s for s in store.sessions(run_id)}
    assert (stale.returncode, other.returncode) == (0, 0), stale_err + other_err
    summary = json.loads(stale_out)
    assert (summary["claimed"], summary["lost"], summary["failed"]) == (1, 1, 0)
    assert json.loads(other_out)["finished"] == 2
    assert {(s.status, s.attempt) for s in sessions.values()} == {("finished", 0), ("finished", 1)}
    assert sessions[taken.session_id].attempt == 1
    assert sessions[taken.session_id].worker_id.split(":")[1] == str(other.pid)


class FrozenRunner:
    """Stands for a worker frozen mid-session (SIGSTOP) for longer than its lease: it
    blocks the event loop, so the lease keeper cannot run; another worker takes the session
    meanwhile, and on waking the session fails at once (its adapter went away), before a
    renewal could tell the worker the lease is gone."""

    def __init__(self, store: Store, lease_s: float) -> None:
        self.store = store
        self.lease_s = lease_s
        self.taken_over: SessionInfo | None = None

    async def run_claimed(
        self,
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None] | None = None,
    ) -> SessionOutcome:
        time.sleep(self.lease_s * 2)  # frozen: the event loop does nothing meanwhile
        other = SessionQueue(self.store, WorkerIdentity("other", "b"), 60.0)
        self.taken_over = other.claim(session.run_id)
        failure = ("streaming", "connection lost", "infrastructure")
        stage, reason, cause = failure
        writer.put_session_status(
            session.run_id, session.session_id, "failed", stage=stage, reason=reason, cause=cause
        )
        return SessionOutcome(session.session_id, "failed", *failure)


async def test_a_session_ended_after_its_lease_was_taken_over_counts_lost(store):
    store.create_run("r", benchmark="none", config={})
    store.add_sessions("r", [("s", ["s"])])
    runner = FrozenRunner(store, lease_s=0.3)

    async def runner_for(_run_id: str) -> FrozenRunner:
        return runner

    endpoint = EndpointConfig(url="ws://127.0.0.1:1/ws", concurrency=1)
    worker = Worker(store, [endpoint], runner_for, lease_s=runner.lease_s, poll_s=0.05)
    summary = await worker.run("r", max_sessions=1)
    assert runner.taken_over is not None
    assert (runner.taken_over.session_id, runner.taken_over.attempt) == ("s", 1)
    assert (summary.claimed, summary.finished, summary.failed, summary.lost) == (1, 0, 0, 1)
    assert summary.failures == []
    (session,) = store.sessions("r")  # the stalled worker's failure was refused
    assert (session.status, session.attempt, session.lease_owner) == ("running", 1, "other")

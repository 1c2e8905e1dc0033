"""Lease deadlines come from the database's clock, so host clock skew cannot hand a live
run or session over (issue 33, item 6).

A lease holder runs in its own process with its clock stepped two hours (tests/skewed_clock
shifts its `datetime.now`; the database server's clock is untouched), against a real store:
a SQLite file and a PostgreSQL database. With deadlines written and compared by each host's
clock, a Core two hours behind wrote a lease that had expired two hours ago, and one two
hours ahead saw every live lease as expired; with the database's clock neither happens.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.run_lease import RunOwned, acquire_run, current_owner
from streameval.core.store.store import Store

ROOT = Path(__file__).resolve().parent.parent
SKEWED_CLOCK = Path(__file__).resolve().parent / "skewed_clock"
TWO_HOURS_S = 2 * 3600
LEASE_S = 60.0
HONEST = WorkerIdentity("core-b:1:honest", "core-b")
REFUSAL = re.compile(
    r"run r is being run by another Core: host (\S+) pid (\d+) \(renewed (\d+)s ago; the "
    r"lease expires in (\d+)s if it stops renewing\); wait for it to end, or stop it and "
    r"resume once its lease expired"
)


@contextmanager
def holder(kind: str, url: str, skew_s: float) -> Iterator[tuple[subprocess.Popen, dict]]:
    """A lease holder (tests/lease_holder.py) whose clock is off by `skew_s`, and its first
    line; its clock's skew is checked against this process's."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(SKEWED_CLOCK), os.environ.get("PYTHONPATH")])
        ),
        "STREAMEVAL_TEST_CLOCK_SKEW_S": str(skew_s),
    }
    command = [sys.executable, "-m", "tests.lease_holder", kind, url, "r", str(LEASE_S), "core-a"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        first = json.loads(process.stdout.readline())
        shown = datetime.fromisoformat(first["now"]) - datetime.now(UTC)
        assert abs(shown.total_seconds() - skew_s) < 60, first  # the skew is really there
        yield process, first
    finally:
        process.stdin.close()
        assert process.wait(timeout=60) == 0


def renewed(process: subprocess.Popen) -> bool:
    process.stdin.write("renew\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())["held"]


def assert_refused(line: str, pid: int) -> None:
    """The one line refusing the run names the owner and a lease of LEASE_S seconds."""
    match = REFUSAL.fullmatch(line)
    assert match is not None, line
    host, owner_pid, ago, left = match.groups()
    assert (host, int(owner_pid)) == ("core-a" if pid else "core-b", pid or os.getpid())
    assert int(ago) < 30 and abs(int(ago) + int(left) - LEASE_S) <= 1, line


def assert_lease_of_the_database(store: Store, start: datetime, until: datetime) -> None:
    """A lease taken and renewed by the database's clock: started within the last half
    minute of it and live for at most LEASE_S more seconds (not two hours off either way)."""
    now = store.clock()
    assert timedelta(0) <= now - start < timedelta(seconds=30), (start, now)
    assert timedelta(0) < until - now <= timedelta(seconds=LEASE_S), (until, now)


def test_a_core_two_hours_behind_keeps_its_run(store_url):
    with Store(store_url) as store:
        store.create_run("r", "b", {})
        with holder("run", store_url, -TWO_HOURS_S) as (core_a, first):
            with pytest.raises(RunOwned) as refused:
                acquire_run(store, "r", HONEST, LEASE_S)
            assert_refused(str(refused.value), first["pid"])
            owner = current_owner(store, "r")
            assert owner.host == "core-a"
            assert_lease_of_the_database(store, owner.renewed_at, owner.expires_at)
            assert renewed(core_a) is True  # it was never "stalled"


def test_a_core_two_hours_ahead_cannot_take_a_live_run(store_url):
    with Store(store_url) as store:
        store.create_run("r", "b", {})
        acquire_run(store, "r", HONEST, LEASE_S)
        with holder("run", store_url, TWO_HOURS_S) as (_, first):
            assert_refused(first["refused"], 0)
        owner = current_owner(store, "r")
        assert owner.owner == HONEST.worker_id
        assert_lease_of_the_database(store, owner.renewed_at, owner.expires_at)


@pytest.mark.parametrize("skew_s", [TWO_HOURS_S, -TWO_HOURS_S], ids=["ahead", "behind"])
def test_a_worker_with_a_wrong_clock_neither_steals_nor_loses_a_session(store_url, skew_s):
    with Store(store_url) as store:
        store.create_run("r", "b", {})
        store.add_sessions("r", [("s1", ["s1"]), ("s2", ["s2"])])
        honest = SessionQueue(store, HONEST, LEASE_S)
        assert honest.claim("r").session_id == "s1"
        with holder("sessions", store_url, skew_s) as (worker, first):
            # Ahead, it would have seen s1's live lease as expired and taken it.
            assert first["claimed"] == ["s2"]
            assert honest.renew("r", ["s1"]) == set()
            # Behind, its lease on s2 would have expired two hours ago.
            assert honest.claim("r") is None
            assert renewed(worker) is True
            sessions = {s.session_id: s for s in store.sessions("r")}
            for session in sessions.values():
                assert_lease_of_the_database(store, session.started_at, session.lease_expires_at)
            assert sessions["s2"].lease_owner == f"core-a:{first['pid']}:holder"

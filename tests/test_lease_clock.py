"""Lease deadlines come from the database's clock, so host clock skew cannot hand a live
run or session over (issue 33, item 6).

A lease holder, or a whole `streameval run`, runs in its own process with its clock stepped
two hours (tests/skewed_clock shifts its `datetime.now`; the database server's clock is
untouched), against a real store: a SQLite file and a PostgreSQL database. With deadlines
written and compared by each host's clock, a Core two hours behind wrote a lease that had
expired two hours ago (a second Core took its live run over, and the first stopped saying
it had stalled), and one two hours ahead saw every live lease as expired; with the
database's clock neither happens.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.run_lease import RunOwned, acquire_run, current_owner
from streameval.core.store.store import Store
from tests.faults import cli, wait_for
from tests.test_run_ownership import LOGGING, PACED, assert_one_attempt_each

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


def skewed_env(skew_s: float) -> dict[str, str]:
    """The environment of a process whose clock is off by `skew_s` seconds."""
    path = [str(SKEWED_CLOCK), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, path)),
        "STREAMEVAL_TEST_CLOCK_SKEW_S": str(skew_s),
    }


@contextmanager
def holder(kind: str, url: str, skew_s: float) -> Iterator[tuple[subprocess.Popen, dict]]:
    """A lease holder (tests/lease_holder.py) whose clock is off by `skew_s`, and its first
    line; its clock's skew is checked against this process's."""
    command = [sys.executable, "-m", "tests.lease_holder", kind, url, "r", str(LEASE_S), "core-a"]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=skewed_env(skew_s),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
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


def test_a_running_core_two_hours_behind_is_not_taken_over(store_url, adapter_env, benchmark_path):
    """The issue's case end to end: two real Cores, the first one's clock two hours behind."""
    with AdapterProcess(LOGGING) as adapter, Store(store_url) as store:
        run = cli(
            "run", "--store", store_url, "--adapter-url", adapter.url, "--concurrency", "1",
            "--benchmark", str(benchmark_path), *PACED, "--json", "--lease-timeout", "10",
        )  # fmt: skip
        first = subprocess.Popen(
            run, env=skewed_env(-TWO_HOURS_S), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip

        def running() -> bool:
            runs = store.list_runs()
            return bool(runs) and any(s.status == "running" for s in store.sessions(runs[0].run_id))

        wait_for(running)
        run_id = store.list_runs()[0].run_id
        # The first Core's clock is two hours behind: it dated the run it created by it.
        behind = datetime.now(UTC) - store.get_run(run_id).created_at
        assert abs(behind.total_seconds() - TWO_HOURS_S) < 60, behind
        refused = subprocess.run(
            cli("run", "--resume", run_id, "--store", store_url, "--json"),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(
            f"error: run {run_id} is being run by another Core: host {socket.gethostname()} "
            f"pid {first.pid} (renewed "
        ), refused.stderr
        out, err = first.communicate(timeout=240)
        assert first.returncode == 0, err  # it never "stalled"
        assert json.loads(out)["run_id"] == run_id
        assert {s.status for s in store.sessions(run_id)} == {"finished"}
        assert_one_attempt_each(store, run_id)

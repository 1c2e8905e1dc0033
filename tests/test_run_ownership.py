"""A run has one owner at a time (issue 13, item 2).

Two real Core processes on one store (SQLite and PostgreSQL): a `run --resume` of a run that
a live Core drives is refused with one line naming the owner's host and pid and how long
ago it renewed; a Core frozen (SIGSTOP) past its lease is taken over, and when it wakes it
stops without touching the run; every session ends with one attempt's events, seq 0..n-1,
never two attempts spliced together.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import sqlite3
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime

from sqlalchemy.engine import make_url

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.run_lease import current_owner
from streameval.core.store.store import Store
from streameval.events import EventKind
from tests.faults import cli, wait_for

LOGGING = "tests.wire_adapters:LoggingAdapter"
# Sessions of 2 to 5 seconds: long enough for a second Core to meet a live first one.
PACED = ("--pacing", "wall_clock", "--speed", "4")
LEASE_S = 3.0


@contextlib.contextmanager
def no_write_in_flight(store_url: str) -> Iterator[None]:
    """While inside, no other process is in a write transaction of a SQLite store: this
    connection holds the write lock (it waits for a transaction in flight to commit). A
    process frozen while it holds SQLite's one write lock blocks every writer for as long as
    it stays frozen, a takeover's lease write included, and no lease can change that; the
    test freezes the owner between its writes, as a stall of a real Core almost always is.
    PostgreSQL has no store-wide write lock."""
    url = make_url(store_url)
    if url.get_backend_name() != "sqlite":
        yield
        return
    connection = sqlite3.connect(url.database, timeout=60, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
        connection.execute("ROLLBACK")
    finally:
        connection.close()


def assert_one_attempt_each(store: Store, run_id: str) -> None:
    for session in store.sessions(run_id):
        events = list(store.iter_events(run_id, session.session_id))
        kinds = [e.kind for e in events]
        assert [e.seq for e in events] == list(range(len(events))), session.session_id
        assert kinds.count(EventKind.SESSION_START) == 1, session.session_id
        assert kinds.count(EventKind.SESSION_FINISHED) == 1, session.session_id


def test_a_live_run_is_refused_and_a_stalled_owner_is_taken_over(
    store_url, adapter_env, benchmark_path
):
    lease = ("--lease-timeout", str(LEASE_S))
    with AdapterProcess(LOGGING) as adapter:
        first = subprocess.Popen(
            cli(
                "run", "--store", store_url, "--adapter-url", adapter.url, "--concurrency",
                "1", "--benchmark", str(benchmark_path), *PACED, "--json", *lease,
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Store(store_url) as store:

            def running() -> bool:
                runs = store.list_runs()
                return bool(runs) and any(
                    s.status == "running" for s in store.sessions(runs[0].run_id)
                )

            wait_for(running)
            run_id = store.list_runs()[0].run_id
            resume = cli("run", "--resume", run_id, "--store", store_url, "--json", *lease)

            # 1. The owner is alive: the second Core refuses, and touches nothing.
            before = {s.session_id: (s.status, s.attempt) for s in store.sessions(run_id)}
            refused = subprocess.run(resume, capture_output=True, text=True, timeout=120)
            assert refused.returncode == 2, refused.stderr
            lines = [line for line in refused.stderr.splitlines() if line.strip()]
            assert len(lines) == 1, refused.stderr
            host = socket.gethostname()
            assert lines[0].startswith(
                f"error: run {run_id} is being run by another Core: host {host} pid "
                f"{first.pid} (renewed "
            ), lines[0]
            after = {s.session_id: (s.status, s.attempt) for s in store.sessions(run_id)}
            assert all(after[sid][1] == attempt for sid, (_, attempt) in before.items())

            # 2. The owner stalls past its lease: the second Core takes the run over.
            with no_write_in_flight(store_url):
                first.send_signal(signal.SIGSTOP)
            try:
                wait_for(
                    lambda: current_owner(store, run_id).expires_at < datetime.now(UTC),
                    timeout_s=LEASE_S * 4,
                )
                second = subprocess.Popen(
                    resume, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                )
                wait_for(lambda: current_owner(store, run_id).pid == second.pid)
            finally:
                first.send_signal(signal.SIGCONT)
            # 3. The stalled Core wakes up, sees it lost the run and stops, one line.
            _, first_err = first.communicate(timeout=120)
            out, err = second.communicate(timeout=240)

            assert first.returncode == 4, first_err
            assert "another Core took it over" in first_err.splitlines()[-1]
            assert "Traceback" not in first_err
            assert second.returncode == 0, err
            assert json.loads(out)["run_id"] == run_id
            assert store.get_run(run_id).status == "finished"
            assert {s.status for s in store.sessions(run_id)} == {"finished"}
            assert_one_attempt_each(store, run_id)
            assert current_owner(store, run_id) is None  # released at the end


def test_a_dead_owner_on_this_host_is_taken_over_at_once(store_url, adapter_env, benchmark_path):
    """SIGKILL leaves the lease behind; its process is gone, so no need to wait it out."""
    with AdapterProcess(LOGGING) as adapter:
        first = subprocess.Popen(
            cli(
                "run", "--store", store_url, "--adapter-url", adapter.url, "--concurrency",
                "1", "--benchmark", str(benchmark_path), *PACED, "--json",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Store(store_url) as store:
            wait_for(lambda: bool(store.list_runs()) and current_owner(
                store, store.list_runs()[0].run_id) is not None)  # fmt: skip
            run_id = store.list_runs()[0].run_id
            first.kill()
            first.wait()
            assert current_owner(store, run_id).pid == first.pid  # the default 60 s lease
            done = subprocess.run(
                cli("run", "--resume", run_id, "--store", store_url, "--json"),
                capture_output=True, text=True, timeout=240,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            assert {s.status for s in store.sessions(run_id)} == {"finished"}
            assert_one_attempt_each(store, run_id)

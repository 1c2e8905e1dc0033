"""The store is checked, not trusted: faults injected into a real Core run (a subprocess
`streameval run` against a real adapter process, paced by the wall clock) on a real SQLite
file and a real PostgreSQL server.

- The SQLite file deleted mid-run: the run fails with a non-zero exit and one line naming
  the deleted store; no traceback per in-flight session; no new empty store is made.
- The database folder made read-only mid-run: the open store keeps working (SQLite's files
  already exist), the run finishes, every event stored exactly once.
- PostgreSQL restarted mid-run (`pg_ctl -m fast stop`, then start on the same port): the
  writes in flight are retried, the run finishes, every event stored exactly once.
- The EventWriter against a deleted store: one EventWriterFailed with the counts of what
  it accepted and could not store; `put` never raises into the sessions.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store, StoreError, StoreLost
from streameval.core.store.writer import EventWriter, EventWriterFailed
from streameval.events import Event, EventKind
from tests.conftest import admin_sql
from tests.event_examples import example
from tests.faults import cli, restart_postgres, unprivileged, wait_for

pytestmark = pytest.mark.timeout(300)

# Frames the Core sends per session of the test benchmark (tests/timeline_fixtures.py).
FRAMES_PER_SESSION = {"t:qa:1": 13, "t:qa:2": 7, "t:pro:1": 18}


def start_run(
    adapter_url: str,
    benchmark: Path,
    url: str,
    cache: Path,
    *,
    as_user: bool = False,
    concurrency: int = 1,
) -> subprocess.Popen:
    command = cli(
        "run",
        "--adapter-url",
        adapter_url,
        "--benchmark",
        str(benchmark),
        "--concurrency",
        str(concurrency),
        "--pacing",
        "wall_clock",
        "--speed",
        "2",
        "--store",
        url,
        "--cache-dir",
        str(cache),
        "--json",
    )
    return subprocess.Popen(
        unprivileged(command) if as_user else command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def events_stored(url: str) -> int:
    try:
        with Store(url, read_only=True) as store:
            runs = store.list_runs()
            return store.count_events(runs[0].run_id) if runs else 0
    except StoreError:  # the Core is still creating the store
        return 0


def assert_every_event_once(url: str, run_id: str) -> None:
    with Store(url, read_only=True) as store:
        assert store.get_run(run_id).status == "finished"
        sessions = {s.session_id: s for s in store.sessions(run_id)}
        assert {sid: s.status for sid, s in sessions.items()} == dict.fromkeys(
            FRAMES_PER_SESSION, "finished"
        )
        for session_id, frames in FRAMES_PER_SESSION.items():
            events = list(store.iter_events(run_id, session_id))
            kinds = [e.kind for e in events]
            assert [e.seq for e in events] == list(range(len(events)))  # no gap, no duplicate
            assert kinds.count(EventKind.FRAME_SENT) == frames
            assert kinds.count(EventKind.SESSION_START) == 1
            assert kinds.count(EventKind.SESSION_FINISHED) == 1


def test_a_sqlite_store_deleted_mid_run_fails_the_run_with_one_line(
    adapter_env: Path, benchmark_path: Path, tmp_path: Path
) -> None:
    db = tmp_path / "db" / "s.db"
    db.parent.mkdir()
    url = f"sqlite:///{db}"
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        # Three sessions at once: all in flight when the file goes.
        core = start_run(adapter.url, benchmark_path, url, tmp_path / "cache", concurrency=3)
        wait_for(lambda: db.exists() and events_stored(url) > 0)
        for path in db.parent.iterdir():  # `rm s.db*`, as a user cleaning up would
            path.unlink()
        stdout, stderr = core.communicate(timeout=120)
    assert core.returncode not in (0, None), (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    assert f"store sqlite:///{db} was deleted while open" in stderr, stderr
    errors = [line for line in stderr.splitlines() if "was deleted while open" in line]
    assert len(errors) == 1, stderr  # reported once, not once per in-flight session
    assert not db.exists()  # no new, empty store was made in its place


def test_a_database_folder_made_read_only_mid_run_does_not_lose_events(
    adapter_env: Path, benchmark_path: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "db"
    folder.mkdir()
    url = f"sqlite:///{folder / 's.db'}"
    cache = tmp_path / "cache"
    # The Core runs bound by permission bits: it must be able to read what it needs.
    tmp_path.chmod(0o755)
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        core = start_run(adapter.url, benchmark_path, url, cache, as_user=True)
        try:
            wait_for(lambda: (folder / "s.db").exists() and events_stored(url) > 0)
            folder.chmod(0o555)
            stdout, stderr = core.communicate(timeout=120)
        finally:
            folder.chmod(0o755)
    assert core.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert_every_event_once(url, json.loads(stdout)["run_id"])


# --------------------------------------------------------------------------- PostgreSQL


def test_a_postgresql_restart_mid_run_loses_and_duplicates_nothing(
    adapter_env: Path, benchmark_path: Path, tmp_path: Path, pg_database: tuple[str, str]
) -> None:
    url, data = pg_database
    with AdapterProcess("tests.wire_adapters:LoggingAdapter") as adapter:
        core = start_run(adapter.url, benchmark_path, url, tmp_path / "cache")
        try:
            wait_for(lambda: events_stored(url) > 0)
            restart_postgres(data, url)
            stdout, stderr = core.communicate(timeout=180)
        finally:
            if core.poll() is None:
                core.kill()
    assert core.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert_every_event_once(url, json.loads(stdout)["run_id"])


class RetryCountingStore(Store):
    """A real store that counts the transient errors its retries absorbed."""

    transient_errors = 0

    def retrying(self, call):
        def counted():
            try:
                return call()
            except StoreError as exc:
                if exc.transient:
                    self.transient_errors += 1
                raise

        return super().retrying(counted)


def test_connections_killed_mid_write_store_every_event_exactly_once(
    pg_database: tuple[str, str],
) -> None:
    url, _ = pg_database
    database = make_url(url).database
    kill = (
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{database}' AND pid <> pg_backend_pid()"
    )
    with RetryCountingStore(url) as store:
        store.create_run("r1", "synthetic", {})
        store.add_sessions("r1", [("s1", ["s1"])])
        stop = threading.Event()

        def killer() -> None:  # for two seconds, the writes meet killed connections
            deadline = time.monotonic() + 2.0
            while not stop.is_set() and time.monotonic() < deadline:
                admin_sql(url, kill)
                time.sleep(0.01)

        thread = threading.Thread(target=killer)
        thread.start()
        try:
            for start in range(0, 2000, 20):
                store.append_events([event("s1", seq) for seq in range(start, start + 20)])
        finally:
            stop.set()
            thread.join()
        assert store.transient_errors > 0  # the fault was injected, and absorbed
        assert [ev.seq for ev in store.iter_events("r1", "s1")] == list(range(2000))


def test_a_read_only_postgresql_store_reads_and_refuses_writes(
    pg_database: tuple[str, str],
) -> None:
    url, _ = pg_database
    with Store(url) as store:
        store.create_run("r1", "synthetic", {})
    with Store(url, read_only=True) as store:
        assert store.get_run("r1").status == "created"
        with pytest.raises(Exception, match="read-only transaction"):
            store.set_run_status("r1", "running")


# --------------------------------------------------------------------------- the writer


def event(session_id: str, seq: int) -> Event:
    payload = example(EventKind.FRAME_SENT)
    return Event("r1", session_id, seq, EventKind.FRAME_SENT, seq, seq / 2, payload)


def test_the_writer_reports_a_deleted_store_once_with_what_it_could_not_store(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    store = Store(f"sqlite:///{db}")
    store.create_run("r1", "synthetic", {})
    store.add_sessions("r1", [("s1", ["s1"]), ("s2", ["s2"])])

    async def scenario() -> EventWriterFailed:
        writer = EventWriter(store, batch_size=10, max_delay_s=10.0)
        await writer.start()
        for seq in range(10):
            writer.put(event("s1", seq))
        await writer.flush()
        db.unlink()
        for seq in range(10, 15):
            writer.put(event("s1", seq))
        writer.put_session_status("r1", "s1", "finished")
        failed = await asyncio.wait_for(writer.wait_failed(), 10)
        # After the failure, the sessions' puts are counted, never raised into them.
        for seq in range(3):
            writer.put(event("s2", seq))
        writer.put_session_status("r1", "s2", "finished")
        assert isinstance(failed.cause, StoreLost) and failed.lost
        with pytest.raises(EventWriterFailed) as closed:
            await writer.close()
        return closed.value

    try:
        failure = asyncio.run(scenario())
    finally:
        store.close()
    assert (failure.unwritten_events, failure.unwritten_changes) == (8, 2)
    assert str(failure) == (
        f"store sqlite:///{db} was deleted while open; what was written since is lost "
        "(8 events and 2 session status changes the writer accepted were not stored)"
    )
    assert not db.exists()

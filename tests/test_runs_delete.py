"""`streameval runs delete RUN...`: every row of the runs goes in one transaction, other runs
and what runs share stay, nothing is deleted without confirmation, for an unknown id or for
a run in progress (without --force). On SQLite and PostgreSQL (the store_url fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, inspect
from sqlalchemy import text as sql_text

from streameval.core.store import models
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.run_lease import acquire_run, current_owner
from streameval.core.store.store import RUN_TABLES, Store
from tests.event_examples import EXAMPLES, example_events
from tests.terminal import read_terminal, sized_terminal
from tests.test_cli import streameval

EVENTS_PER_SESSION = len(EXAMPLES)
CACHE_BYTES = 1_500_000


SUITE = "suite-0"


def add_run(store: Store, run_id: str, cache_dir: Path | None = None) -> None:
    """A run with two records, two sessions with events, the digests of its two videos, an
    analysis, an expired run lease, in the suite SUITE."""
    config = {"profile": "trace", "cache_dir": str(cache_dir)} if cache_dir else {}
    store.create_run(run_id, "synthetic", config)
    store.add_records(
        run_id,
        [
            {"record_id": f"rec-{i}", "task": "qa", "task_type": "counting",
             "source_benchmark": "synthetic", "video_path": f"v{i}.mp4"}
            for i in range(2)
        ],
    )  # fmt: skip
    store.add_sessions(run_id, [(f"{run_id}-s{i}", [f"rec-{i}"]) for i in range(2)])
    for i in range(2):
        store.bind_video(run_id, f"v{i}.mp4", f"{i}" * 64)
    for i in range(2):
        store.append_events(example_events(run_id, f"{run_id}-s{i}"))
    store.put_analysis(run_id, "causality", {"verdict": "pass"})
    if store.suite(SUITE) is None:
        store.create_suite(SUITE, {"adapters": [], "benchmarks": []})
    store.add_suite_run(SUITE, run_id, "adapter", run_id)
    expired = datetime.now(UTC) - timedelta(minutes=5)
    with store.transaction("add an expired lease") as conn:
        conn.execute(
            insert(models.run_owners).values(
                run_id=run_id, owner="core-gone", host="old-host", pid=1,
                renewed_at=expired, expires_at=expired,
            )
        )  # fmt: skip


def run_tables(store: Store) -> list[str]:
    """Every table of the migrated database that holds rows of runs."""
    with store.transaction("list tables") as conn:
        inspector = inspect(conn)
        return sorted(
            name
            for name in inspector.get_table_names()
            if "run_id" in {column["name"] for column in inspector.get_columns(name)}
        )


def rows_of(store: Store, run_id: str) -> dict[str, int]:
    with store.transaction("count rows") as conn:
        return {
            table: conn.execute(
                sql_text(f"SELECT count(*) FROM {table} WHERE run_id = :run"), {"run": run_id}
            ).scalar_one()
            for table in run_tables(store)
        }


def shared_rows(store: Store) -> tuple[int, ...]:
    """Rows no run owns: registered adapter endpoints, the judge's verdict cache and the
    suites (a suite keeps its file; its runs go)."""
    with store.transaction("count shared rows") as conn:
        return tuple(
            conn.execute(sql_text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in ("adapter_endpoints", "judge_cache", "suites")
        )


FULL_RUN = {
    "events": 2 * EVENTS_PER_SESSION,
    "run_analyses": 1,
    "run_owners": 1,
    "run_records": 2,
    "run_videos": 2,
    "runs": 1,
    "sessions": 2,
    "suite_runs": 1,
}
GONE = dict.fromkeys(FULL_RUN, 0)


@pytest.fixture
def frame_cache(tmp_path: Path) -> Path:
    """A cache folder whose frame cache holds CACHE_BYTES."""
    cache = tmp_path / "cache"
    entry = cache / "frames" / "ab" / "ab12-rules"
    entry.mkdir(parents=True)
    (entry / "000000.jpg").write_bytes(b"\xff" * (CACHE_BYTES - 100))
    (entry / "index.json").write_bytes(b"{" + b" " * 98 + b"}")
    return cache


def test_deleting_removes_every_row_of_the_runs_and_nothing_else(store_url, frame_cache):
    with Store(store_url) as store:
        assert run_tables(store) == sorted(table.name for table in RUN_TABLES)
        add_run(store, "r1", frame_cache)
        add_run(store, "r2", frame_cache.parent / "no-cache-here")
        add_run(store, "r3", frame_cache)
        add_run(store, "r4")
        store.register_adapter_endpoint("gpu-a", "ws://gpu-a:8765/ws", 2)
        with store.transaction("add a judge verdict") as conn:
            conn.execute(
                sql_text(
                    "INSERT INTO judge_cache VALUES ('k', 'v1', 'm', 't', 'q', 'r', 'p', 1.0, "
                    "'yes', :now)"
                ),
                {"now": datetime.now(UTC)},
            )
        assert rows_of(store, "r1") == FULL_RUN
        display_url = store.url

    deleted = streameval("runs", "delete", "r1", "r2", "--yes", "--json", "--store", store_url)
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == {
        "deleted": ["r1", "r2"],
        "store": display_url,
        "rows": {table: 2 * count for table, count in FULL_RUN.items()},
        "frame_caches": [{"path": str(frame_cache / "frames"), "bytes": CACHE_BYTES}],
    }
    with Store(store_url) as store:
        assert rows_of(store, "r1") == rows_of(store, "r2") == GONE
        assert rows_of(store, "r3") == rows_of(store, "r4") == FULL_RUN
        assert shared_rows(store) == (1, 1, 1)
        assert [run.run_id for run in store.list_runs()] == ["r4", "r3"]

    said = streameval("runs", "delete", "r3", "--yes", "--store", store_url)
    assert said.returncode == 0, said.stderr
    frames = frame_cache / "frames"
    assert said.stderr.splitlines() == [
        f"deleted 1 run(s) (r3) from {display_url}: 2 records, 2 sessions, "
        f"{2 * EVENTS_PER_SESSION} events",
        f"frame cache {frames} (1.5 MB) left in place: its frames are shared by every run on "
        f"this machine; clear it with: rm -r {frames}",
    ]
    assert (frames / "ab" / "ab12-rules" / "000000.jpg").is_file()
    with Store(store_url) as store:
        assert rows_of(store, "r3") == GONE and rows_of(store, "r4") == FULL_RUN


def test_an_unknown_run_id_deletes_nothing(store_url):
    with Store(store_url) as store:
        add_run(store, "r1")
        display_url = store.url
    done = streameval("runs", "delete", "r1", "nope", "other", "--yes", "--store", store_url)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: unknown run ids 'nope', 'other' in store {display_url}: nothing deleted"
    ]
    with Store(store_url) as store:
        assert rows_of(store, "r1") == FULL_RUN


def test_a_run_in_progress_is_refused_unless_forced(store_url):
    with Store(store_url) as store:
        add_run(store, "r1")
        add_run(store, "r2")
        acquire_run(store, "r1", WorkerIdentity("core-a", "host-a"), lease_s=600)
        core_until = current_owner(store, "r1").expires_at
        claimed = SessionQueue(store, WorkerIdentity("worker-b", "gpu-b"), 600).claim("r2")
        assert claimed is not None and claimed.session_id == "r2-s0"
        worker_until = store.sessions("r2")[0].lease_expires_at

    refused = streameval("runs", "delete", "r1", "--yes", "--store", store_url)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: run 'r1' is in progress: a Core on host host-a (pid {os.getpid()}) holds it "
        f"until {core_until.isoformat(timespec='seconds')}; stop it first, or add --force to "
        "delete it anyway: nothing deleted"
    ]
    refused = streameval("runs", "delete", "r2", "--yes", "--store", store_url)
    assert refused.returncode == 2
    assert refused.stderr.splitlines() == [
        f"error: run 'r2' is in progress: worker worker-b on host gpu-b (session 'r2-s0') "
        f"holds it until {worker_until.isoformat(timespec='seconds')}; stop it first, or add "
        "--force to delete it anyway: nothing deleted"
    ]
    with Store(store_url) as store:
        assert rows_of(store, "r1") == rows_of(store, "r2") == FULL_RUN

    forced = streameval("runs", "delete", "r1", "r2", "--yes", "--force", "--store", store_url)
    assert forced.returncode == 0, forced.stderr
    with Store(store_url) as store:
        assert rows_of(store, "r1") == rows_of(store, "r2") == GONE


# --------------------------------------------------------------------------- confirmation


@pytest.fixture
def sqlite_store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with Store(url) as store:
        add_run(store, "r1")
        add_run(store, "r2")
    return url


def test_without_a_terminal_nothing_is_deleted_without_yes(sqlite_store):
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "runs", "delete", "r1", "--store", sqlite_store],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: nobody can confirm the deletion (stdin is not a terminal): add --yes"
    ]
    with Store(sqlite_store) as store:
        assert rows_of(store, "r1") == FULL_RUN


def answer_on_a_terminal(args: list[str], answer: str) -> tuple[int, str]:
    """Run the command on a pseudo-terminal, answer its prompt; (exit status, what it wrote)."""
    leader, follower = sized_terminal(200)
    process = subprocess.Popen(
        [sys.executable, "-m", "streameval.cli", *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    try:
        seen = read_terminal(leader, 180, reply=(b"[y/N]: ", answer.encode() + b"\n"))
    finally:
        os.close(leader)
    return process.wait(timeout=60), seen.decode().replace("\r\n", "\n")


def test_on_a_terminal_it_asks_first(sqlite_store):
    with Store(sqlite_store) as store:
        display_url = store.url
    prompt = f"Delete 2 run(s) (r1, r2) from {display_url}? [y/N]: "
    args = ["runs", "delete", "r1", "r2", "--store", sqlite_store]

    status, output = answer_on_a_terminal(args, "n")
    assert status == 1
    assert output == f"{prompt}n\nnothing deleted\n"
    with Store(sqlite_store) as store:
        assert rows_of(store, "r1") == rows_of(store, "r2") == FULL_RUN

    status, output = answer_on_a_terminal(args, "y")
    assert status == 0, output
    assert output.startswith(f"{prompt}y\ndeleted 2 run(s) (r1, r2) from {display_url}: ")
    with Store(sqlite_store) as store:
        assert rows_of(store, "r1") == rows_of(store, "r2") == GONE

"""Run creation gets the store's retry budget (issue 33, item 6): a SQLite store that another
process keeps locked for longer than SQLite's busy timeout (10 s) but less than the retry
budget (RETRY_BUDGET_S, 60 s) delays `run --detach`; it no longer fails it at the busy
timeout ("database is locked", exit 2) while every other store call waited on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from streameval.core.store.retry import RETRY_BUDGET_S
from streameval.core.store.store import Store
from tests.faults import cli

BUSY_TIMEOUT_S = 10.0  # engine.py's PRAGMA busy_timeout
LOCKED_S = 15.0


def hold_lock(path: str, seconds: float) -> subprocess.Popen[str]:
    """A second process holding SQLite's write lock on `path` for `seconds`; returns once it
    holds it."""
    code = (
        "import sqlite3, sys, time\n"
        "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "db.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "time.sleep(float(sys.argv[2]))\n"
        "db.execute('COMMIT')\n"
    )
    locker = subprocess.Popen(
        [sys.executable, "-c", code, path, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert locker.stdout.readline() == "locked\n"
    return locker


def test_run_creation_waits_out_a_lock_longer_than_the_busy_timeout(tmp_path, benchmark_path):
    assert BUSY_TIMEOUT_S < LOCKED_S < RETRY_BUDGET_S
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    Store(url).close()
    locker = hold_lock(str(path), LOCKED_S)
    start = time.monotonic()
    done = subprocess.run(
        cli("run", "--store", url, "--detach", "--json", "--benchmark", str(benchmark_path)),
        capture_output=True,
        text=True,
        timeout=RETRY_BUDGET_S + 60,
    )
    waited = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert locker.wait(timeout=10) == 0
    assert waited >= LOCKED_S  # it was held up by the lock, and waited it out
    run_id = json.loads(done.stdout)["run_id"]
    with Store(url, read_only=True) as store:
        sessions = store.sessions(run_id)
        assert [(s.status, s.attempt) for s in sessions] == [("pending", 0)] * 3
        assert len(store.records(run_id)) == 3

"""The Core stops cleanly, with one line and a non-zero exit (issue 13, items 4, 8, 10).

A real SIGTERM (what `docker stop` sends) to a running `streameval run`: the sessions in
flight go back to the queue, the run is `interrupted`, its lease is released so a resume
starts at once, and the process exits 143. The SQLite store file deleted under a running
Core: the run stops with one line and exit 4 instead of reporting sessions "finished" into a
file nobody can read.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.run_lease import current_owner
from streameval.core.store.store import Store
from streameval.events import EventKind
from tests.faults import cli, wait_for, without_progress

SLOW = "tests.wire_adapters:SlowReferenceAdapter"


def test_sigterm_interrupts_the_run_cleanly_and_it_resumes_at_once(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess(SLOW) as adapter:
        core = subprocess.Popen(
            cli(
                "run", "--store", url, "--adapter-url", adapter.url, "--concurrency", "2",
                "--limit", "8", "--json",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Store(url) as store:

            def one_finished_and_one_running() -> bool:
                runs = store.list_runs()
                if not runs:
                    return False
                statuses = [s.status for s in store.sessions(runs[0].run_id)]
                return "finished" in statuses and "running" in statuses

            wait_for(one_finished_and_one_running)
            core.send_signal(signal.SIGTERM)
            out, err = core.communicate(timeout=60)
            run_id = store.list_runs()[0].run_id
            assert core.returncode == 143, err
            lines = [line for line in err.splitlines() if line.strip()]
            assert "Traceback" not in err
            assert lines[-1] == (
                f"terminated (SIGTERM): resume it with `streameval run --resume {run_id}`"
            )
            assert out == ""
            assert store.get_run(run_id).status == "interrupted"
            sessions = store.sessions(run_id)
            assert "running" not in {s.status for s in sessions}  # given back at once
            assert current_owner(store, run_id) is None  # no lease to wait out
            # A session given back keeps no partial events.
            for session in sessions:
                if session.status == "pending":
                    assert list(store.iter_events(run_id, session.session_id)) == []

            resumed = subprocess.run(
                cli("run", "--resume", run_id, "--store", url, "--json"),
                capture_output=True, text=True, timeout=240,
            )  # fmt: skip
            assert resumed.returncode == 0, resumed.stderr
            assert json.loads(resumed.stdout)["status"] == "finished"
            for session in store.sessions(run_id):
                kinds = [e.kind for e in store.iter_events(run_id, session.session_id)]
                assert kinds.count(EventKind.SESSION_START) == 1


def test_a_store_deleted_mid_run_stops_the_run_with_one_line(tmp_path: Path):
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with AdapterProcess(SLOW) as adapter:
        core = subprocess.Popen(
            cli(
                "run", "--store", url, "--adapter-url", adapter.url, "--concurrency", "2",
                "--limit", "12", "--json",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        with Store(url) as store:
            wait_for(
                lambda: (
                    bool(store.list_runs())
                    and any(
                        s.status == "finished" for s in store.sessions(store.list_runs()[0].run_id)
                    )
                )
            )
            run_id = store.list_runs()[0].run_id
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        out, err = core.communicate(timeout=120)

    assert core.returncode == 4, err
    assert "Traceback" not in err
    assert out == ""  # no summary claiming finished sessions
    lines = without_progress(err)
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: run {run_id} stopped: the store failed: "), lines[0]
    assert "s.db" in lines[0] and "deleted" in lines[0], lines[0]

"""One run spread over several worker processes through the shared store: a worker killed
mid-session loses nothing and duplicates nothing, and two workers never run one session.

Real processes throughout: `streameval run --detach`, adapters served by
`python -m streameval.adapters`, and `streameval worker` processes on PostgreSQL (SQLite for
the single-machine case), compared with one plain `streameval run` of the same benchmark.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.store import Store
from streameval.events import Event, EventKind
from streameval.scorer.report import score_run
from tests.conftest import _fresh_pg_database, pg_server_url
from tests.test_compose import check_streameval, cli_command

SLOW = "tests.wire_adapters:SlowReferenceAdapter"
TIMING = ("ttft", "latency", "delay_runtime")


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from _fresh_pg_database(pg_server_url())


def streameval(*args: str, **options) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "streameval.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, **options)


def worker(
    store: str, run_id: str, adapter_url: str, lease_s: float, *options: str
) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "streameval.cli", "worker", "--store", store, "--run", run_id,
        "--adapter-url", adapter_url, "--lease-timeout", str(lease_s), "--json", *options,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def detached_run(store: str, *options: str) -> str:
    done = streameval("run", "--store", store, "--detach", "--json", *options)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["run_id"]


def event_counts(store_url: str, run_id: str) -> dict[str, int]:
    with Store(store_url) as store:
        return dict(Counter(event.session_id for event in store.iter_events(run_id)))


def quality(store_url: str, run_id: str) -> dict[str, object]:
    """Every metric value except the timings, which differ between any two runs."""
    with Store(store_url) as store:
        scores = score_run(store, run_id).model_dump(mode="json")
    return {
        f"{family}.{name}": metric["value"]
        for family, metrics in scores["overall"].items()
        for name, metric in metrics.items()
        if not any(word in name for word in TIMING)
    }


def test_a_worker_killed_mid_session_loses_and_duplicates_nothing(pg_url, tmp_path):
    options = ("--limit", "8")
    with AdapterProcess(SLOW) as adapter:
        single = f"sqlite:///{tmp_path / 'single.db'}"
        done = streameval("run", "--store", single, "--adapter-url", adapter.url, *options)
        assert done.returncode == 0, done.stderr
        (reference_run,) = [run.run_id for run in Store(single).list_runs()]

        run_id = detached_run(pg_url, *options)
        workers = [worker(pg_url, run_id, adapter.url, lease_s=2.0) for _ in range(3)]
        victim = workers[0]
        # Kill the first worker while it holds a session, as a node failure would.
        deadline = time.monotonic() + 60
        with Store(pg_url) as store:
            while time.monotonic() < deadline:
                held = [s for s in store.sessions(run_id) if s.status == "running"]
                mine = [s for s in held if s.worker_id.split(":")[1] == str(victim.pid)]
                if mine:
                    break
                time.sleep(0.01)
            assert mine, "the first worker never held a session"
            victim.send_signal(signal.SIGKILL)
            killed_session = mine[0].session_id
            for survivor in workers[1:]:
                out, err = survivor.communicate(timeout=120)
                assert survivor.returncode == 0, err
            sessions = {s.session_id: s for s in store.sessions(run_id)}
            run = store.get_run(run_id)
        victim.wait()

    assert run.status == "finished"
    assert {s.status for s in sessions.values()} == {"finished"}
    # The killed attempt was discarded and the session run again, once, by a survivor.
    assert sessions[killed_session].attempt == 1
    assert sessions[killed_session].worker_id.split(":")[1] != str(victim.pid)
    assert sum(s.attempt for s in sessions.values()) == 1
    assert all(s.lease_owner is None and s.host for s in sessions.values())
    assert event_counts(pg_url, run_id) == event_counts(single, reference_run)
    assert quality(pg_url, run_id) == quality(single, reference_run)


def test_two_workers_never_claim_the_same_session(pg_url):
    """Many claimers race over many sessions: each session is claimed exactly once."""
    with Store(pg_url) as store:
        store.create_run("race", benchmark="none", config={})
        store.add_sessions("race", [(f"s{i:04d}", [f"s{i:04d}"]) for i in range(400)])
    script = (
        "import json, sys\n"
        "from streameval.core.store.queue import SessionQueue, WorkerIdentity\n"
        "from streameval.core.store.store import Store\n"
        "store = Store(sys.argv[1]); me = sys.argv[2]\n"
        "queue = SessionQueue(store, WorkerIdentity(me, 'here'), 60)\n"
        "claimed = []\n"
        "while (session := queue.claim('race')) is not None:\n"
        "    claimed.append(session.session_id)\n"
        "    store.set_session_status('race', session.session_id, 'finished', owner=me)\n"
        "print(json.dumps(claimed))\n"
    )
    claimers = [
        subprocess.Popen(
            [sys.executable, "-c", script, pg_url, f"w{i}"], stdout=subprocess.PIPE, text=True
        )
        for i in range(8)
    ]
    claims = [json.loads(claimer.communicate(timeout=120)[0]) for claimer in claimers]
    every = [session for claimed in claims for session in claimed]
    assert len(every) == len(set(every)) == 400
    assert sum(1 for claimed in claims if claimed) >= 2  # the race really happened
    with Store(pg_url) as store:
        sessions = store.sessions("race")
    assert {(s.status, s.attempt) for s in sessions} == {("finished", 0)}
    assert Counter(s.worker_id for s in sessions) == Counter(
        f"w{i}" for i, claimed in enumerate(claims) for _ in claimed
    )


def test_a_lost_lease_fences_the_old_workers_writes(pg_url):
    """A worker that stalled past its lease can no longer store events or an outcome for the
    session: the new attempt alone counts."""
    with Store(pg_url) as store:
        store.create_run("fence", benchmark="none", config={})
        store.add_sessions("fence", [("s", ["s"])])
        slow = SessionQueue(store, WorkerIdentity("slow", "a"), lease_s=0.01)
        fast = SessionQueue(store, WorkerIdentity("fast", "b"), lease_s=60)
        assert slow.claim("fence").session_id == "s"
        time.sleep(0.05)
        assert fast.renew("fence", ["s"]) == {"s"}  # fast holds nothing yet
        retaken = fast.claim("fence")
        assert (retaken.session_id, retaken.attempt, retaken.worker_id) == ("s", 1, "fast")
        assert slow.renew("fence", ["s"]) == {"s"}
        payload = {"stage": "streaming", "reason": "stalled", "cause": "infrastructure"}
        late = Event("fence", "s", 0, EventKind.SESSION_FAILED, 1, None, payload)
        assert store.append_events([late], owner="slow") == {"s"}
        assert store.count_events("fence") == 0
        assert not store.set_session_status("fence", "s", "failed", owner="slow")
        assert store.set_session_status("fence", "s", "finished", owner="fast")
        (session,) = store.sessions("fence")
    assert (session.status, session.attempt, session.lease_owner) == ("finished", 1, None)


def test_sessions_record_host_worker_and_the_gpu_the_adapter_reports(tmp_path):
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    run_id = detached_run(store_url, "--limit", "3", "--task", "qa")
    with AdapterProcess("tests.wire_adapters:GpuReportingAdapter") as adapter:
        done = streameval(
            "worker", "--store", store_url, "--run", run_id, "--adapter-url", adapter.url, "--json"
        )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["claimed"], summary["finished"], summary["runs"]) == (3, 3, [run_id])
    with Store(store_url) as store:
        sessions = store.sessions(run_id)
        hellos = [e for e in store.iter_events(run_id) if e.kind == EventKind.ADAPTER_HELLO]
        assert store.get_run(run_id).status == "finished"
    assert {(s.host, s.worker_id, s.endpoint) for s in sessions} == {
        (summary["host"], summary["worker_id"], adapter.url)
    }
    assert {s.adapter["gpu"] for s in sessions} == {"Test Accelerator GPU-0123"}
    assert [hello.payload.gpu for hello in hellos] == ["Test Accelerator GPU-0123"] * 3
    listed = streameval("runs", run_id, "--store", store_url, "--json")
    assert json.loads(listed.stdout) == [
        {
            "session_id": s.session_id, "status": "finished", "attempt": 0,
            "host": summary["host"], "worker_id": summary["worker_id"],
            "gpu": "Test Accelerator GPU-0123", "endpoint": adapter.url,
        }
        for s in sessions
    ]  # fmt: skip
    table = streameval("runs", run_id, "--store", store_url, env={**os.environ, "COLUMNS": "300"})
    assert summary["worker_id"] in table.stdout and "Test Accelerator GPU-0123" in table.stdout


def test_one_worker_drives_every_adapter_url_it_is_given(tmp_path):
    """A worker per machine: one --adapter-url per GPU's adapter, sessions on each."""
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    run_id = detached_run(store_url, "--limit", "4", "--task", "qa")
    with AdapterProcess("reference") as first, AdapterProcess("reference") as second:
        done = streameval(
            "worker", "--store", store_url, "--run", run_id, "--adapter-url", first.url,
            "--adapter-url", second.url, "--json",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["claimed"], summary["finished"]) == (4, 4)
    with Store(store_url) as store:
        endpoints = Counter(s.endpoint for s in store.sessions(run_id))
    # Each endpoint's slot claims until the run is drained: both took sessions.
    assert set(endpoints) == {first.url, second.url}
    assert sum(endpoints.values()) == 4


def test_the_readmes_scale_out_commands_exist_with_their_options():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("## Scale out") :]
    block = section[section.index("```bash") : section.index("```\n", 8)].replace("\\\n", " ")
    commands = [
        shlex.split(line.split("streameval ", 1)[1].split(")", 1)[0].split("#")[0])
        for line in block.splitlines()
        if "streameval " in line
    ]
    assert [cli_command(words)[1] for words in commands] == [
        ("run",), ("launch", "slurm"), ("runs",), ("score",),
    ]  # fmt: skip
    for words in commands:
        check_streameval(words)


def test_only_sessions_other_workers_hold_are_outstanding(pg_url):
    """An idle slot waits for sessions another worker holds (it may die), not for its own
    worker's sessions, nor for a session running under no lease (a Core before leases)."""
    with Store(pg_url) as store:
        store.create_run("wait", benchmark="none", config={})
        store.add_sessions("wait", [("a", ["a"]), ("b", ["b"]), ("legacy", ["legacy"])])
        store.set_session_status("wait", "legacy", "running")
        mine = SessionQueue(store, WorkerIdentity("mine", "a"), lease_s=60)
        other = SessionQueue(store, WorkerIdentity("other", "b"), lease_s=60)
        assert mine.claim("wait").session_id == "a"
        assert (mine.outstanding("wait"), other.outstanding("wait")) == (0, 1)
        assert other.claim("wait").session_id == "b"
        assert (mine.outstanding("wait"), other.outstanding("wait")) == (1, 1)
        assert mine.claim("wait") is None  # the legacy session is not claimable either

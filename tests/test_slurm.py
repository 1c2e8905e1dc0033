"""One run spread over a real Slurm job array, as a user would do it: `streameval run
--detach` stores the run's sessions in PostgreSQL, `launch_slurm.submit` puts the
deploy/slurm template in as a 3-task array (each task serves the reference adapter on its
node and runs `streameval worker` against it), and every session ends up finished, spread
over the tasks, and scored.

Needs a Slurm cluster whose nodes see this checkout and reach the PostgreSQL server named by
STREAMEVAL_TEST_PG_URL (CI: a private single-node cluster from .ci/start-slurm.sh). Without
one the test skips and says why, or fails where STREAMEVAL_REQUIRE_SLURM is set. The tests
after it check launch_slurm against stand-in sbatch and scontrol commands and need neither.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from streameval.core.launch import slurm as launch_slurm
from streameval.core.store.store import Store
from tests.conftest import PG_URL_ENV, _fresh_pg_database

TASKS = 3
SESSIONS = 6
# Each worker takes at most this many sessions, so the run needs every task: synthetic
# sessions take well under a second, and one worker could otherwise claim them all before
# the others have started their adapters.
SESSIONS_PER_WORKER = SESSIONS // TASKS


def _missing(what: str) -> NoReturn:
    """Skip for a missing piece of the environment, or fail where Slurm is required."""
    if os.environ.get("STREAMEVAL_REQUIRE_SLURM"):
        pytest.fail(f"STREAMEVAL_REQUIRE_SLURM is set but {what}")
    pytest.skip(f"{what}; CI starts a private cluster with .ci/start-slurm.sh")


def _slurm_problem() -> str | None:
    """Why no Slurm cluster can be used from here, or None when one answers with a node up."""
    for command in ("sinfo", "sbatch", "scontrol"):
        if shutil.which(command) is None:
            return f"no {command} command"
    try:
        done = subprocess.run(
            ["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 20 s"
    if done.returncode != 0:
        return f"sinfo failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"
    states = done.stdout.split()
    # "idle*" and the like: not responding. "~" and "#": powered down or up, still usable.
    usable = ("idle", "mixed", "allocated", "completing")
    if not any(state.rstrip("~#") in usable for state in states):
        return f"no Slurm node is up (sinfo: {', '.join(states) or 'no nodes'})"
    return None


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database: the store every task reaches over the network."""
    problem = _slurm_problem()
    if problem is not None:
        _missing(f"no usable Slurm cluster ({problem})")
    server_url = os.environ.get(PG_URL_ENV)
    if not server_url:
        _missing(f"{PG_URL_ENV} is not set (the array's store is PostgreSQL)")
    yield from _fresh_pg_database(server_url)


def _cli(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, (
        f"streameval {' '.join(args)} exited {done.returncode}:\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def _outputs(folder: Path) -> str:
    return "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}" for path in folder.iterdir())


@pytest.mark.postgres
def test_a_run_spread_over_a_slurm_job_array(pg_url: str, tmp_path: Path) -> None:
    # The tasks inherit this environment (sbatch's --export=ALL): the venv's commands first
    # on PATH, and the test's private STREAMEVAL_CACHE_DIR.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    created = json.loads(
        _cli(
            "run", "--benchmark", "synthetic", "--limit", str(SESSIONS), "--detach",
            "--store", pg_url, "--json",
            env=env,
        )
    )  # fmt: skip
    run_id = created["run_id"]
    assert created["sessions"] == SESSIONS
    with Store(pg_url) as store:
        assert {s.status for s in store.sessions(run_id)} == {"pending"}

    logs = tmp_path / "slurm"
    logs.mkdir()
    job_id = launch_slurm.submit(
        run_id,
        pg_url,
        TASKS,
        worker_args=["--max-sessions", str(SESSIONS_PER_WORKER)],
        output=str(logs / "worker-%A_%a.out"),
        env=env,
    )
    try:
        ends = launch_slurm.wait(job_id, timeout_s=90)
    finally:
        # A failed or timed-out wait leaves no task running into the dropped database.
        subprocess.run(["scancel", job_id], capture_output=True, timeout=30)
    assert [end.task_id for end in ends] == list(range(TASKS))
    assert all(end.ok for end in ends), f"{ends}\n{_outputs(logs)}"

    with Store(pg_url) as store:
        sessions = store.sessions(run_id)
    assert len(sessions) == SESSIONS
    # (A worker exits 0 when its sessions failed: no session is left to claim either way.)
    statuses = [(s.session_id, s.status, s.failure_reason) for s in sessions]
    assert all(s.status == "finished" for s in sessions), f"{statuses}\n{_outputs(logs)}"
    # Every array task's worker did its share, and each session says which worker ran it.
    assert all(s.host for s in sessions), [(s.session_id, s.host) for s in sessions]
    per_worker = Counter(s.worker_id for s in sessions)
    assert None not in per_worker, per_worker
    assert sorted(per_worker.values()) == [SESSIONS_PER_WORKER] * TASKS, per_worker

    scores = json.loads(_cli("score", run_id, "--store", pg_url, "--json", env=env))
    assert scores["run_id"] == run_id
    assert scores["run_status"] == "finished"


# --------------------------------------------------------- launch_slurm without a cluster


def _fake_command(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(0o755)


def test_submit_hands_the_settings_to_sbatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "seen"
    _fake_command(
        bin_dir,
        "sbatch",
        f'printf "%s\\n" "$@" > {seen}.args; env > {seen}.env; echo "42;cluster"',
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("MODEL_CMD", "left over from the submitting shell")

    job_id = launch_slurm.submit(
        "run1",
        "postgresql+psycopg://db/streameval",
        3,
        adapter="openai",
        adapter_args=[
            "--config",
            "qwen2.5-vl-7b",
            "-A",
            "base_url=http://127.0.0.1:$MODEL_PORT/v1",
        ],
        worker_args="--concurrency 2",
        output="logs/w-%A_%a.out",
        sbatch_args=["--gres=gpu:1"],
    )

    assert job_id == "42"
    assert (tmp_path / "seen.args").read_text().splitlines() == [
        "--parsable",
        "--array=0-2",
        "--output=logs/w-%A_%a.out",
        "--gres=gpu:1",
        str(launch_slurm.DEFAULT_TEMPLATE),
    ]
    env = dict(
        line.split("=", 1)
        for line in (tmp_path / "seen.env").read_text().splitlines()
        if "=" in line
    )
    assert env["STREAMEVAL_STORE"] == "postgresql+psycopg://db/streameval"
    assert env["RUN_ID"] == "run1"
    assert env["ADAPTER"] == "openai"
    # Single-quoted, so that the task (not the submitting shell) expands $MODEL_PORT.
    assert (
        env["ADAPTER_ARGS"]
        == "--config qwen2.5-vl-7b -A 'base_url=http://127.0.0.1:$MODEL_PORT/v1'"
    )
    assert env["WORKER_ARGS"] == "--concurrency 2"
    assert "MODEL_CMD" not in env
    assert Path(env["STREAMEVAL_BIN"]).parent == Path(sys.executable).parent


def test_wait_reports_how_each_task_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tasks 2 and 3 were cancelled before they started: Slurm shows them as one range record.
    records = [
        "JobId=8 ArrayJobId=7 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0",
        "JobId=7 ArrayJobId=7 ArrayTaskId=2-3%2 JobState=CANCELLED Reason=None ExitCode=0:0",
        "JobId=9 ArrayJobId=7 ArrayTaskId=0 JobState=COMPLETED Reason=None ExitCode=0:0",
    ]
    _fake_command(tmp_path, "scontrol", "cat <<'OUT'\n" + "\n".join(records) + "\nOUT")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    ends = launch_slurm.wait("7", timeout_s=5)

    assert [(e.task_id, e.state, e.exit_code, e.ok) for e in ends] == [
        (0, "COMPLETED", 0, True),
        (1, "FAILED", 3, False),
        (2, "CANCELLED", 0, False),
        (3, "CANCELLED", 0, False),
    ]


def test_launch_slurm_submits_follows_and_fails_with_a_failed_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen.args"
    _fake_command(tmp_path, "sbatch", f'printf "%s\\n" "$@" > {seen}; echo 7')
    records = [
        "JobId=8 ArrayJobId=7 ArrayTaskId=0 JobState=COMPLETED Reason=None ExitCode=0:0",
        "JobId=9 ArrayJobId=7 ArrayTaskId=1 JobState=FAILED Reason=NonZeroExitCode ExitCode=2:0",
    ]
    _fake_command(tmp_path, "scontrol", "cat <<'OUT'\n" + "\n".join(records) + "\nOUT")
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [
            sys.executable, "-m", "streameval.cli", "launch", "slurm", "run1",
            "--store", "postgresql+psycopg://db/s", "--tasks", "2", "--adapter", "openai",
            "--adapter-config", "qwen2.5-vl-7b", "--sbatch-arg=--gres=gpu:1", "--wait", "--json",
        ],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {
        "job_id": "7",
        "tasks": [
            {"task": 0, "state": "COMPLETED", "exit_code": 0},
            {"task": 1, "state": "FAILED", "exit_code": 2},
        ],
    }
    assert seen.read_text().splitlines() == [
        "--parsable", "--array=0-1", "--gres=gpu:1", str(launch_slurm.DEFAULT_TEMPLATE),
    ]  # fmt: skip

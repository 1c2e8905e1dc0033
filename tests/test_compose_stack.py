"""docker-compose.yml's cpu profile brought up for real on a Docker engine, as a user would:
the one-shot benchmark job runs (with three extra workers on the store's queue), scores and
exits 0; its results file equals what
`streameval score` says inside the `core` container; the results API lists the run and
serves its thumbnails; the README's three curl calls register an adapter endpoint with the
control API (it survives a restart of `core`), start a run on it and read its metrics.

Needs a Docker engine with Compose v2 (DOCKER_HOST) that can build the project's images:
without one these tests skip and say so, or fail where STREAMEVAL_REQUIRE_DOCKER is set (CI,
which starts an engine with .ci/start-docker.sh and names its build settings in COMPOSE_FILE).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docker_engine import require_engine

REPO = Path(__file__).resolve().parent.parent
TOKEN = "compose-test-token"
BUILD_AND_RUN_TIMEOUT_S = 1200
# The stack is built and run in the first test's setup: its limit is the build's, not the
# suite's per-test default.
pytestmark = pytest.mark.timeout(BUILD_AND_RUN_TIMEOUT_S + 300)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Stack:
    """One compose project of the cpu profile, with its own ports, folders and volumes."""

    env: dict[str, str]
    results_dir: Path

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        command = ["docker", "compose", "--profile", "cpu", *args]
        return subprocess.run(
            command, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.env[f'{service.upper()}_PORT']}"


def new_stack(root: Path, prefix: str, **settings: str) -> Stack:
    """A compose project of the cpu profile with its folders under `root`, a name of its own
    and free ports; `settings` are further compose variables."""
    for folder in ("benchmark", "videos", "results"):
        (root / folder).mkdir()
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": f"{prefix}-{uuid.uuid4().hex[:8]}",
        "CORE_PORT": str(_free_port()),
        "RESULTS_PORT": str(_free_port()),
        "BENCHMARK_DIR": str(root / "benchmark"),
        "VIDEO_DIR": str(root / "videos"),
        "RESULTS_DIR": str(root / "results"),
        **settings,
    }
    return Stack(env, root / "results")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_engine(["docker", "compose", "version"])
    stack = new_stack(
        tmp_path_factory.mktemp("compose"), "streameval-test", STREAMEVAL_API_TOKEN=TOKEN,
        # One session at a time in the job itself, so the three extra workers get some.
        CONCURRENCY="1",
    )  # fmt: skip
    try:
        yield stack
    finally:
        # Its containers, volumes and images go; the build cache stays for the next run.
        stack.compose("down", "-v", "--remove-orphans", "--rmi", "local")


def _must(done: subprocess.CompletedProcess[str], what: str) -> str:
    output = f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{output}"
    return done.stdout


def _poll(url: str, headers: dict[str, str] | None = None, until_s: float = 120) -> Any:
    """GET url until the run it describes is no longer created or running."""
    deadline = time.monotonic() + until_s
    while True:
        body = httpx.get(url, headers=headers, timeout=10).raise_for_status().json()
        if body["status"] not in ("created", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.5)


@pytest.fixture(scope="module")
def benchmark_run(stack: Stack) -> dict[str, Any]:
    """The cpu profile's one-shot job, run to its exit code; then the services alone are
    brought back up (the job stops them when it exits) for the checks that follow."""
    done = stack.compose(
        "up", "--build", "--scale", "worker=3", "--exit-code-from", "benchmark",
        timeout=BUILD_AND_RUN_TIMEOUT_S,
    )  # fmt: skip
    _must(done, "docker compose --profile cpu up --build --scale worker=3 --exit-code-from …")
    (results_file,) = stack.results_dir.glob("*.json")
    _must(stack.compose("up", "-d", "--wait", "core", "results", "reference-adapter"), "up --wait")
    return json.loads(results_file.read_text())


def test_the_job_exits_0_with_scores_equal_to_streameval_score_in_core(
    stack: Stack, benchmark_run: dict[str, Any]
):
    run_id = benchmark_run["run_id"]
    assert benchmark_run["run_status"] == "finished"
    assert benchmark_run["sessions"]["finished"] == benchmark_run["records_scored"] == 20
    assert len(benchmark_run["records"]) == 20
    inside = _must(
        stack.compose("exec", "-T", "core", "streameval", "score", run_id, "--json"),
        "streameval score inside core",
    )
    scores = json.loads(inside)
    assert {key: value for key, value in benchmark_run.items() if key != "records"} == scores


SESSION_HOSTS = """
import json, sys
from streameval.core.store.store import Store
with Store(__import__("os").environ["STREAMEVAL_STORE"]) as store:
    print(json.dumps([[s.status, s.attempt, s.host] for s in store.sessions(sys.argv[1])]))
"""


def test_scaled_workers_share_the_jobs_run(stack: Stack, benchmark_run: dict[str, Any]):
    """`--scale worker=3`: the workers and the job drew sessions of one run from the store,
    each session run once."""
    script = ["python3", "-c", SESSION_HOSTS, benchmark_run["run_id"]]
    done = _must(stack.compose("exec", "-T", "core", *script), "read the sessions in core")
    sessions = json.loads(done)
    assert len(sessions) == 20
    assert {(status, attempt) for status, attempt, _ in sessions} == {("finished", 0)}
    assert len({host for _, _, host in sessions}) >= 2


def test_the_results_api_lists_the_run_and_serves_its_thumbnails(
    stack: Stack, benchmark_run: dict[str, Any]
):
    run_id = benchmark_run["run_id"]
    results = stack.url("results")
    listed = httpx.get(f"{results}/runs", timeout=10).raise_for_status().json()
    assert run_id in [run["run_id"] for run in listed["items"]]
    metrics = httpx.get(f"{results}/runs/{run_id}/metrics", timeout=60).raise_for_status()
    assert metrics.json()["overall"] == benchmark_run["overall"]
    # The frame cache the job filled is mounted into `results`: thumbnails work.
    record_id = benchmark_run["records"][0]["record_id"]
    frames = f"{results}/runs/{run_id}/records/{record_id}/frames"
    index = httpx.get(frames, timeout=10).raise_for_status().json()
    assert index["available"] is True, index
    thumbnail = httpx.get(f"{frames}/0", params={"width": 64}, timeout=10)
    assert thumbnail.status_code == 200
    assert thumbnail.headers["content-type"] == "image/jpeg"
    assert thumbnail.content[:2] == b"\xff\xd8"


def readme_curls(stack: Stack, run_id: str = "RUN_ID") -> list[str]:
    """The README's three curl calls (register, start a run, read its metrics), pointed at
    this stack's ports and token."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### On a laptop: the cpu profile") :]
    up = section.index("docker compose --profile cpu up -d")
    block = section[section.rindex("```bash\n", 0, up) :]
    block = block[: block.index("```", 3)].replace("\\\n", " ")
    calls = [line.strip() for line in block.splitlines() if line.strip().startswith("curl ")]
    replacements = {
        "http://127.0.0.1:8700": stack.url("core"),
        "http://127.0.0.1:8800": stack.url("results"),
        "Bearer $STREAMEVAL_API_TOKEN": f"Bearer {TOKEN}",
        "RUN_ID": run_id,
    }
    for old, new in replacements.items():
        calls = [call.replace(old, new) for call in calls]
    return calls


def curl(call: str) -> Any:
    done = subprocess.run(
        [*shlex.split(call), "--silent", "--show-error", "--fail-with-body"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"{call}: {done.stdout} {done.stderr}"
    return json.loads(done.stdout)


def test_the_readmes_curl_calls_register_run_and_score_across_a_core_restart(
    stack: Stack, benchmark_run: dict[str, Any]
):
    core = stack.url("core")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    register, start, _ = readme_curls(stack)
    endpoint = {"name": "my-adapter", "url": "ws://reference-adapter:8765/ws", "concurrency": 4}
    assert httpx.post(f"{core}/adapters", json=endpoint, timeout=10).status_code == 401
    assert curl(register) == endpoint

    # Registered endpoints live in the store: a restarted Core still knows them.
    _must(stack.compose("restart", "core"), "restart core")
    _must(stack.compose("up", "-d", "--wait", "core"), "core healthy again")
    listed = httpx.get(f"{core}/adapters", headers=auth, timeout=10).raise_for_status().json()
    assert listed == [endpoint]

    run_id = curl(start)["run_id"]
    status = _poll(f"{core}/runs/{run_id}", headers=auth)
    assert (status["status"], status["sessions"]) == ("finished", {"finished": 4})

    (read_metrics,) = [call for call in readme_curls(stack, run_id) if "/metrics" in call]
    metrics = curl(read_metrics)
    assert (metrics["run_id"], metrics["run_status"], metrics["records_scored"]) == (
        run_id,
        "finished",
        4,
    )
    assert metrics["sessions"]["finished"] == 4

"""docker-compose.yml's benchmark job stopped and started for real on a Docker engine:
`docker stop` on the job's container mid-run exits 143 (the job's shell, the container's
PID 1, passes SIGTERM on to `streameval run`), leaves the run `interrupted`, and
`streameval run --resume` in the same service finishes it; a job whose adapter is not ready
exits 2 with one line after READY_TIMEOUT instead of starting a run.

Needs a Docker engine with Compose v2, like tests/test_compose_stack.py (which it shares its
stack helpers with): without one these tests skip and say so, or fail where
STREAMEVAL_REQUIRE_DOCKER is set.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.docker_engine import require_engine
from tests.test_compose_stack import BUILD_AND_RUN_TIMEOUT_S, Stack, _must, new_stack

pytestmark = pytest.mark.timeout(BUILD_AND_RUN_TIMEOUT_S + 600)
READY_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The services up and healthy; the job not started. Its run is long enough to stop:
    paced on the wall clock, one session at a time."""
    require_engine(["docker", "compose", "version"])
    stack = new_stack(
        tmp_path_factory.mktemp("compose-stop"), "streameval-stop",
        STREAMEVAL_API_TOKEN="compose-stop-test-token", PACING="wall_clock", CONCURRENCY="1",
        RUN_ARGS="--limit 2", READY_TIMEOUT=str(READY_TIMEOUT_S),
    )  # fmt: skip
    try:
        up = stack.compose(
            "up", "-d", "--build", "--wait", "core", "results", "reference-adapter",
            timeout=BUILD_AND_RUN_TIMEOUT_S,
        )  # fmt: skip
        _must(up, "docker compose --profile cpu up -d --build --wait core results …")
        yield stack
    finally:
        stack.compose("down", "-v", "--remove-orphans", "--rmi", "local")


def docker(stack: Stack, *args: str) -> str:
    done = subprocess.run(
        ["docker", *args], env=stack.env, capture_output=True, text=True, timeout=120
    )
    return _must(done, f"docker {' '.join(args)}")


def running_run(stack: Stack, until_s: float = 300) -> dict[str, Any]:
    """The job's run, once one of its sessions runs (read from the results API)."""
    results = stack.url("results")
    deadline = time.monotonic() + until_s
    while time.monotonic() < deadline:
        for item in httpx.get(f"{results}/runs", timeout=10).raise_for_status().json()["items"]:
            run = httpx.get(f"{results}/runs/{item['run_id']}", timeout=10).json()
            if run["sessions"].get("running"):
                return run
        time.sleep(0.5)
    raise AssertionError(f"no session of the job's run was running within {until_s} s")


def test_docker_stop_interrupts_the_jobs_run_with_143_and_it_resumes(stack: Stack):
    _must(stack.compose("up", "-d", "--no-deps", "benchmark"), "up -d benchmark")
    container = _must(stack.compose("ps", "-a", "-q", "benchmark"), "ps benchmark").strip()
    run_id = running_run(stack)["run_id"]

    docker(stack, "stop", container)
    assert docker(stack, "inspect", "-f", "{{.State.ExitCode}}", container).strip() == "143"
    logs = subprocess.run(
        ["docker", "logs", container], env=stack.env, capture_output=True, text=True, timeout=60
    )
    assert logs.stderr.splitlines()[-1] == (
        f"terminated (SIGTERM): resume it with `streameval run --resume {run_id}`"
    )
    stopped = httpx.get(f"{stack.url('results')}/runs/{run_id}", timeout=10).json()
    assert stopped["status"] == "interrupted"
    assert "running" not in stopped["sessions"]

    resumed = stack.compose(
        "run", "--rm", "--no-deps", "benchmark", "streameval", "run", "--resume", run_id, "--json",
        timeout=600,
    )  # fmt: skip
    summary = json.loads(_must(resumed, "streameval run --resume in the benchmark service"))
    assert (summary["status"], summary["sessions"], summary["finished"]) == ("finished", 2, 2)


def test_a_job_whose_adapter_is_not_ready_exits_2_with_one_line(stack: Stack):
    _must(stack.compose("stop", "reference-adapter"), "stop reference-adapter")
    done = stack.compose("run", "--rm", "--no-deps", "benchmark", timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("benchmark job:")]
    assert line.startswith(
        "benchmark job: the adapter at http://adapter:8765/healthz is not ready after "
        f"{READY_TIMEOUT_S} s (READY_TIMEOUT): "
    )
    runs = httpx.get(f"{stack.url('results')}/runs", timeout=10).raise_for_status().json()
    assert len(runs["items"]) == 1  # the first test's: no run was started

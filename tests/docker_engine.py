"""Whether a usable Docker engine answers here: the compose stack and image-cache tests skip
without one and say why, or fail where STREAMEVAL_REQUIRE_DOCKER is set (CI starts one with
.ci/start-docker.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def engine_problem(*checks: list[str]) -> str | None:
    """Why no engine can be used here, or None when `docker info` and every check answer."""
    if shutil.which("docker") is None:
        return "no docker command"
    for check in (["docker", "info"], *checks):
        done = subprocess.run(check, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            return f"`{' '.join(check)}` failed: {done.stderr.strip().splitlines()[-1:]}"
    return None


def require_engine(*checks: list[str]) -> None:
    """Skips the test without a usable engine, or fails it where CI promised one."""
    problem = engine_problem(*checks)
    if problem is None:
        return
    if os.environ.get("STREAMEVAL_REQUIRE_DOCKER"):
        pytest.fail(f"no usable Docker engine but STREAMEVAL_REQUIRE_DOCKER is set: {problem}")
    pytest.skip(f"no usable Docker engine ({problem}); CI starts one with .ci/start-docker.sh")

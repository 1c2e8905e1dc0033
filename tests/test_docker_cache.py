"""The images install their dependencies in a layer that a change to the sources does not
invalidate: read from the Dockerfiles, and, where a Docker engine with BuildKit is at hand,
by building the service image twice around a one-line source change.

The engine test skips without an engine or without the `python:3.11-slim` base image (CI
builds a stand-in with .ci/images/build.sh), and fails instead where STREAMEVAL_REQUIRE_DOCKER
is set, as in CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker_engine import require_engine
from tests.test_compose import dockerfile

REPO = Path(__file__).resolve().parent.parent
DOCKERFILES = ("Dockerfile", "adapter.Dockerfile")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SOURCES = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
# What the dependency layer may be built from: a change to anything else must not touch it.
DEPENDENCY_INPUTS = {"pyproject.toml", "docker/requirements.py"}
BUILD_TIMEOUT_S = 900


def steps(name: str) -> list[tuple[str, str]]:
    return dockerfile(REPO / "docker" / name)


def dependency_step(name: str) -> int:
    (index,) = [
        i
        for i, (instruction, arguments) in enumerate(steps(name))
        if instruction == "RUN" and "install -r requirements.txt" in arguments
    ]
    return index


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_dependencies_install_before_any_source_is_copied(name: str) -> None:
    found = steps(name)
    install = dependency_step(name)
    copied_before = {
        source
        for instruction, arguments in found[:install]
        if instruction == "COPY"
        for source in arguments.split()[:-1]
    }
    assert copied_before == DEPENDENCY_INPUTS
    copied_after = {
        source.rstrip("/")
        for instruction, arguments in found[install:]
        if instruction == "COPY"
        for source in arguments.split()[:-1]
    }
    assert copied_after >= SOURCES | {"README.md"}
    # pip's cache is a cache mount, which a PIP_NO_CACHE_DIR setting would switch off.
    assert "--mount=type=cache,target=/root/.cache/pip" in found[install][1]
    assert not any("PIP_NO_CACHE_DIR" in args for step, args in found if step == "ENV")
    # The project goes in after its sources, without its dependencies again.
    (project,) = [
        arguments
        for instruction, arguments in found[install + 1 :]
        if instruction == "RUN" and "install" in arguments
    ]
    assert "--no-deps" in project and "--no-build-isolation" in project


def test_the_requirements_list_is_pyprojects(tmp_path: Path) -> None:
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    script = REPO / "docker" / "requirements.py"

    def listed(*extras: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(script), *extras]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60)

    project = PYPROJECT["project"]
    assert listed("postgres").stdout.splitlines() == [
        *PYPROJECT["build-system"]["requires"],
        *project["dependencies"],
        *project["optional-dependencies"]["postgres"],
    ]
    unknown = listed("nope")
    assert (unknown.returncode, unknown.stderr) == (1, "error: pyproject.toml has no extra nope\n")


# ----------------------------------------------------------------------------- engine


@pytest.fixture
def engine() -> None:
    require_engine(["docker", "buildx", "version"])
    base = ["docker", "image", "inspect", "python:3.11-slim"]
    if subprocess.run(base, capture_output=True, timeout=60).returncode != 0:
        problem = "no python:3.11-slim image (.ci/images/build.sh builds a stand-in)"
        if os.environ.get("STREAMEVAL_REQUIRE_DOCKER"):
            pytest.fail(f"STREAMEVAL_REQUIRE_DOCKER is set but there is {problem}")
        pytest.skip(problem)


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A copy of what the Dockerfile is built from, to change without touching the checkout."""
    root = tmp_path / "context"
    ignore = shutil.ignore_patterns("__pycache__")
    for source in SOURCES | {"docker"}:
        shutil.copytree(REPO / source, root / source, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    return root


@pytest.fixture
def tags() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    if made:
        subprocess.run(["docker", "image", "rm", *made], capture_output=True, timeout=120)


def build(context: Path, target: str, tag: str) -> str:
    """`docker buildx build` of one stage; returns BuildKit's plain progress log."""
    command = [
        "docker", "buildx", "build", "--load", "--network", "host", "--progress", "plain",
        "-f", "docker/Dockerfile", "--target", target, "-t", tag, ".",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=context, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def layers(tag: str) -> list[str]:
    command = ["docker", "image", "inspect", "-f", "{{range .RootFS.Layers}}{{.}} {{end}}", tag]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()


@pytest.mark.timeout(3 * BUILD_TIMEOUT_S)
def test_a_source_change_rebuilds_on_the_same_dependency_layer(
    engine: None, context: Path, tags: list[str]
) -> None:
    name = f"streameval-cache-test-{uuid.uuid4().hex[:8]}"
    tags += [f"{name}:deps", f"{name}:before", f"{name}:after"]
    build(context, "deps", tags[0])
    build(context, "base", tags[1])
    with (context / "core_server" / "__init__.py").open("a") as source:
        source.write("# a one-line change\n")
    log = build(context, "base", tags[2])

    dependencies = layers(tags[0])
    before, after = layers(tags[1]), layers(tags[2])
    # pip writes new files (times, bytecode) whenever it runs: equal layers were reused.
    assert before[: len(dependencies)] == after[: len(dependencies)] == dependencies
    assert before != after  # the changed source is in the image
    install = [line for line in log.splitlines() if "install -r requirements.txt" in line]
    step = install[0].split()[0]  # "#9"
    assert f"{step} CACHED" in log.splitlines()

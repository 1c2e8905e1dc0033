"""docker-compose.yml and docker/ checked without a Docker engine: services, dependencies,
health checks, ports, volumes and GPUs; every variable documented in .env.example; every
file the Dockerfiles copy present; every `streameval` command and option they run accepted by
the real CLI; the health-check routes served by the real apps; the benchmark job script run
for real against an adapter process.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from fastapi.testclient import TestClient

from streameval.adapters.registry import build_adapter
from streameval.cli import app as cli_app
from streameval.core.adapter_process import AdapterProcess

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
JOB_SCRIPT = REPO / "docker" / "benchmark-job.sh"
VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?::?-([^}]*))?\}")


def env_example() -> dict[str, str]:
    lines = (REPO / ".env.example").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {key: value for key, value in pairs}


def interpolate(text: str, env: dict[str, str]) -> str:
    """What Compose does to a value before using it: ${VAR}, ${VAR:-default}, $$ -> $."""

    def substitute(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1)) or (match.group(2) or "")

    return VARIABLE.sub(substitute, text)


def command_words(service: str) -> list[str]:
    command = SERVICES[service]["command"]
    if isinstance(command, list):
        return [interpolate(word, env_example()) for word in command]
    return shlex.split(interpolate(command, env_example()))


def dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]


# --------------------------------------------------------------------------- the CLI


def cli_command(words: list[str]) -> tuple[Any, tuple[str, ...], list[str]]:
    """The (click) command `streameval WORDS...` reaches, its name path, the words left."""
    command = typer.main.get_command(cli_app)
    path: list[str] = []
    rest = list(words)
    # Groups are recognised by their `commands`: typer may vendor its own click.
    while hasattr(command, "commands") and rest and rest[0] in command.commands:
        path.append(rest.pop(0))
        command = command.commands[path[-1]]
    assert not hasattr(command, "commands"), f"`streameval {' '.join(words)}`: no command"
    return command, tuple(path), rest


def check_streameval(words: list[str]) -> None:
    """Every option of a `streameval ...` invocation exists on that command."""
    command, _, rest = cli_command(words)
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    for word in rest:
        if word.startswith("-"):
            assert word.split("=", 1)[0] in known, f"streameval {words}: unknown option {word}"


def script_invocations(path: Path) -> list[list[str]]:
    """The `streameval` command lines of a shell script, continuations joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for match in re.finditer(r"(?:^|[\s(])streameval ([^\n)]*)", text):
        words = re.sub(r"\$\{\w+:\+(--[\w-]+)[^}]*\}", r"\1 X", match.group(1)).split()
        found.append([word for word in words if not word.startswith(("$", '"', ">"))])
    return found


def test_every_streameval_command_exists_with_its_options():
    invocations = []
    for name, service in SERVICES.items():
        if "build" in service:
            words = command_words(name)
            if words[0] == "streameval":
                invocations.append(words[1:])
    for path in (REPO / "docker").glob("*Dockerfile"):
        for instruction, arguments in dockerfile(path):
            if instruction == "CMD":
                invocations.append(json.loads(arguments)[1:])
    invocations += script_invocations(JOB_SCRIPT)
    commands = {cli_command(words)[1] for words in invocations}
    assert commands == {
        ("adapter", "serve"), ("core-api",), ("results-api",), ("run",), ("score",),
    }  # fmt: skip
    for words in invocations:
        check_streameval(words)


def test_the_adapter_service_serves_the_documented_default():
    """The adapter's command line, with .env.example's values, builds a valid adapter."""
    words = command_words("adapter")
    assert words[:4] == ["streameval", "adapter", "serve", "openai"]
    config = words[words.index("--config") + 1]
    options = [words[i + 1] for i, word in enumerate(words) if word == "-A"]
    adapter = build_adapter("openai", config, options)
    assert adapter.config.base_url == "http://model:8000/v1"
    assert adapter.config.model == env_example()["MODEL"]
    assert words[words.index("--port") + 1] == "8765"
    # vLLM must accept as many images per request as the adapter sends.
    model = command_words("model")
    limit = json.loads(model[model.index("--limit-mm-per-prompt") + 1])
    assert limit["image"] >= adapter.config.qa_max_frames
    assert model[model.index("--model") + 1] == adapter.config.model


# --------------------------------------------------------------------------- compose


def test_services_and_their_dependencies():
    assert set(SERVICES) == {
        "postgres", "model", "judge", "adapter", "core", "results", "benchmark",
    }  # fmt: skip
    needs = {name: service.get("depends_on", {}) for name, service in SERVICES.items()}
    for name, dependencies in needs.items():
        for dependency, condition in dependencies.items():
            assert condition == {"condition": "service_healthy"}, (name, dependency)
            assert "healthcheck" in SERVICES[dependency], f"{dependency} has no health check"
    assert needs["adapter"].keys() == {"model"}
    assert needs["core"].keys() == needs["results"].keys() == {"postgres"}
    # The job starts only when everything else is healthy, and runs once.
    assert needs["benchmark"].keys() == set(SERVICES) - {"benchmark", "model"}
    assert SERVICES["benchmark"]["restart"] == "no" and "healthcheck" not in SERVICES["benchmark"]
    assert all("healthcheck" in s for n, s in SERVICES.items() if n != "benchmark")


def test_ports_volumes_and_gpus():
    env = env_example()
    published = {
        name: [interpolate(port, env) for port in service.get("ports", [])]
        for name, service in SERVICES.items()
    }
    # Only the two APIs are published; each on the port its command listens on.
    assert {name for name, ports in published.items() if ports} == {"core", "results"}
    for name in ("core", "results"):
        (mapping,) = published[name]
        inside = mapping.split(":")[1]
        words = command_words(name)
        assert words[words.index("--port") + 1] == inside
        assert mapping.split(":")[0] == env[f"{name.upper()}_PORT"]
    named = set(COMPOSE["volumes"])
    for service in SERVICES.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source in named or source.startswith("${"), volume
    assert "pgdata:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    for name, gpus in (("model", "MODEL_GPUS"), ("judge", "JUDGE_GPUS")):
        (device,) = SERVICES[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert device["device_ids"] == [f"${{{gpus}}}"]
    for name in ("adapter", "core", "results", "benchmark"):
        assert "deploy" not in SERVICES[name]  # no GPU where none is needed


def test_every_variable_is_documented_in_env_example():
    text = (REPO / "docker-compose.yml").read_text()
    used = {m.group(1) for m in VARIABLE.finditer(text) if m.group(1)}
    assert used == set(env_example())
    # Shell variables inside health checks are escaped, so Compose leaves them alone.
    assert "$${POSTGRES_USER}" in text


def test_health_check_routes_are_served(tmp_path):
    """The URLs the health checks poll answer 200 on the real apps, without credentials."""
    from streameval.core.api import create_app as core_app
    from streameval.scorer.service.api import create_app as results_app

    def polled(service: str) -> str:
        test = " ".join(SERVICES[service]["healthcheck"]["test"])
        (url,) = re.findall(r"http://localhost:\d+(/[\w./-]*)", test)
        return url

    store = f"sqlite:///{tmp_path / 's.db'}"
    with TestClient(core_app(store, "a-secret-token")) as client:
        assert client.get(polled("core")).status_code == 200
        assert client.get("/runs/x").status_code == 401  # everything else needs the token
    with TestClient(results_app(store)) as client:
        assert client.get(polled("results")).status_code == 200
    with AdapterProcess("always") as adapter:
        base = f"http://{adapter.host}:{adapter.port}"
        assert httpx.get(base + polled("adapter")).status_code == 200
    assert polled("model") == polled("judge") == "/health"  # vLLM's readiness route


# --------------------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("name", ["Dockerfile", "adapter.Dockerfile"])
def test_dockerfiles_copy_only_what_exists_and_is_not_ignored(name):
    path = REPO / "docker" / name
    ignore = (REPO / "docker" / f"{name}.dockerignore").read_text().splitlines()
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    copies = [args.split() for instruction, args in dockerfile(path) if instruction == "COPY"]
    assert copies
    for *sources, _ in copies:
        for source in sources:
            assert (REPO / source).exists(), f"{name}: COPY {source} does not exist"
            assert source.rstrip("/") in allowed, f"{name}: COPY {source} is dockerignored"


def test_compose_builds_existing_dockerfiles_and_targets():
    for name, service in SERVICES.items():
        build = service.get("build")
        if build is None:
            continue
        path = REPO / build["context"] / build["dockerfile"]
        stages = {
            args.split()[-1]
            for instruction, args in dockerfile(path)
            if instruction == "FROM" and " AS " in args
        }
        assert build.get("target") is None or build["target"] in stages, name
        if command_words(name)[0] != "streameval":
            # A helper command must be installed by that image.
            installed = [
                args.split()[-1] for instruction, args in dockerfile(path) if instruction == "COPY"
            ]
            assert f"/usr/local/bin/{command_words(name)[0]}" in installed


def test_the_images_get_the_presets_and_yaml():
    """A non-editable install (what the images do) must ship the presets and PyYAML."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "presets/*.yaml" in project["tool"]["setuptools"]["package-data"]["streameval.adapters"]
    assert any(dep.lower().startswith("pyyaml") for dep in project["project"]["dependencies"])


# --------------------------------------------------------------------------- the job


def run_job(tmp_path: Path, adapter_url: str, benchmark: Path, run_args: str = ""):
    env = {
        **os.environ,
        **env_example(),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "STREAMEVAL_STORE": f"sqlite:///{tmp_path / 's.db'}",
        "ADAPTER_URL": adapter_url,
        "BENCHMARK": str(benchmark),
        "RUN_ARGS": run_args,
        "RESULTS_DIR": str(tmp_path / "results"),
    }
    return subprocess.run(
        ["sh", str(JOB_SCRIPT)], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_benchmark_job_runs_scores_and_exits_with_the_runs_status(
    adapter_env, benchmark_path, tmp_path
):
    with AdapterProcess("always") as adapter:
        done = run_job(tmp_path, adapter.url, benchmark_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[0])
    assert (summary["sessions"], summary["finished"], summary["failed"]) == (3, 3, 0)
    scores = json.loads((tmp_path / "results" / f"{summary['run_id']}.json").read_text())
    assert scores["run_id"] == summary["run_id"] and len(scores["records"]) == 3

    with AdapterProcess("tests.wire_adapters:HangingAdapter") as adapter:
        hung = run_job(tmp_path, adapter.url, benchmark_path, "--response-timeout 0.5")
    # Every session failed: the run failed (3), and its scores were still written.
    assert hung.returncode == 3 and "3 sessions failed" in hung.stderr
    hung_id = json.loads(hung.stdout.splitlines()[0])["run_id"]
    assert (tmp_path / "results" / f"{hung_id}.json").is_file()

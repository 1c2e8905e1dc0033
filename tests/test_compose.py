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
import signal
import socket
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
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import Store
from tests.faults import wait_for

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
JOB_SCRIPT = REPO / "docker" / "benchmark-job.sh"
# The innermost ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:+alternative} of a value.
VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-+])([^${}]*))?\}")
ESCAPED_DOLLAR = "\0"


def env_example() -> dict[str, str]:
    lines = (REPO / ".env.example").read_text().splitlines()
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {key: value for key, value in pairs}


def interpolate(text: str, env: dict[str, str]) -> str:
    """What Compose does to a value before using it: nested ${VAR}, ${VAR:-default} and
    ${VAR:+alternative} substituted from the inside out, then $$ -> $."""

    def substitute(match: re.Match) -> str:
        name, operator, word = match.groups()
        value = env.get(name)
        if operator == ":+":
            return word if value else ""
        if operator == ":-":
            return value or word
        if operator == "-":
            return word if value is None else value
        return value or ""

    text = text.replace("$$", ESCAPED_DOLLAR)
    while (substituted := VARIABLE.sub(substitute, text)) != text:
        text = substituted
    return text.replace(ESCAPED_DOLLAR, "$")


def command_words(service: str, env: dict[str, str] | None = None) -> list[str]:
    """The service's command as the container gets it, with .env.example's values."""
    env = env_example() if env is None else env
    command = SERVICES[service]["command"]
    if isinstance(command, list):
        return [interpolate(word, env) for word in command]
    return shlex.split(interpolate(command, env))


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
    # A group runs by itself when it has a callback for that (`runs` lists, `runs delete`).
    runnable = not hasattr(command, "commands") or command.invoke_without_command
    assert runnable, f"`streameval {' '.join(words)}`: no command"
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
        ("adapter", "serve"), ("core-api",), ("results-api",), ("run",), ("score",), ("worker",),
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
    # `vllm serve MODEL`: the model is the positional argument (`--model` is deprecated).
    for name, variable in (("model", "MODEL"), ("judge", "JUDGE_MODEL")):
        assert SERVICES[name]["entrypoint"] == ["vllm", "serve"]
        assert command_words(name)[0] == env_example()[variable]
        assert "--model" not in command_words(name)
    assert model[0] == adapter.config.model


def test_the_cpu_adapter_is_what_the_job_connects_to():
    words = command_words("reference-adapter")
    assert words[:4] == ["streameval", "adapter", "serve", "reference"]
    build_adapter("reference", None, [])
    job_url = SERVICES["benchmark"]["environment"]["ADAPTER_URL"]
    # Under the cpu profile the name `adapter` is the reference adapter's alias.
    assert job_url == f"ws://adapter:{words[words.index('--port') + 1]}/ws"
    assert SERVICES["reference-adapter"]["networks"]["default"]["aliases"] == ["adapter"]


# --------------------------------------------------------------------------- compose


def profiles() -> dict[str, set[str]]:
    return {name: set(service.get("profiles", [])) for name, service in SERVICES.items()}


def test_services_profiles_and_their_dependencies():
    assert profiles() == {
        "postgres": set(), "core": set(), "results": set(),
        "benchmark": {"cpu", "gpu"}, "reference-adapter": {"cpu"}, "worker": {"cpu"},
        "model": {"gpu"}, "adapter": {"gpu"}, "judge": {"judge"},
    }  # fmt: skip
    needs = {name: service.get("depends_on", {}) for name, service in SERVICES.items()}
    for name, dependencies in needs.items():
        for dependency, condition in dependencies.items():
            assert condition["condition"] == "service_healthy", (name, dependency)
            assert "healthcheck" in SERVICES[dependency], f"{dependency} has no health check"
    assert needs["adapter"].keys() == {"model"}
    assert needs["core"].keys() == {"postgres"}
    # The results API opens the store read-only, so it starts once the Core migrated it.
    assert needs["results"].keys() == {"core"}
    # Extra workers join once the store is migrated and their adapter answers; none by
    # default, `--scale worker=N` adds them.
    assert needs["worker"].keys() == {"core", "reference-adapter"}
    assert SERVICES["worker"]["deploy"] == {"replicas": 0}
    worker = command_words("worker")
    assert (
        worker[worker.index("--adapter-url") + 1]
        == SERVICES["benchmark"]["environment"]["ADAPTER_URL"]
    )
    assert "--follow" in worker
    # The job waits for the services of whichever profiles are on, and runs once.
    job = needs["benchmark"]
    assert job.keys() == {"core", "results", "reference-adapter", "adapter", "judge"}
    optional = {name for name, condition in job.items() if condition.get("required") is False}
    assert optional == {"reference-adapter", "adapter", "judge"}
    assert SERVICES["benchmark"]["restart"] == "no" and "healthcheck" not in SERVICES["benchmark"]
    # Nothing waits on the job or the workers; every other service says when it is ready.
    waited_for = [name for name in SERVICES if name not in ("benchmark", "worker")]
    assert all("healthcheck" in SERVICES[name] for name in waited_for)


def test_the_cpu_profile_needs_no_gpu_no_registry_image_and_no_judge():
    cpu = [name for name, wanted in profiles().items() if not wanted or "cpu" in wanted]
    assert sorted(cpu) == [
        "benchmark", "core", "postgres", "reference-adapter", "results", "worker",
    ]  # fmt: skip
    for name in cpu:
        assert "resources" not in SERVICES[name].get("deploy", {})
        # Built from the project's Dockerfile, or the one registry image the CI stands in for.
        assert "build" in SERVICES[name] or SERVICES[name]["image"] == "postgres:16"
        assert SERVICES[name].get("build", {}).get("dockerfile", "docker/Dockerfile") == (
            "docker/Dockerfile"
        )


def test_the_judge_is_used_and_waited_for_only_when_configured():
    """No JUDGE_URL (the default): the scorer gets no judge settings, so the results API
    starts and scores by exact match. With one, both settings reach it."""
    for name in ("results", "benchmark"):
        environment = SERVICES[name]["environment"]
        unset = {key: interpolate(str(value), {}) for key, value in environment.items()}
        assert unset["STREAMEVAL_JUDGE_URL"] == unset["STREAMEVAL_JUDGE_MODEL"] == ""
        configured = {"JUDGE_URL": "http://judge:8000/v1"}
        chosen = {key: interpolate(str(value), configured) for key, value in environment.items()}
        assert chosen["STREAMEVAL_JUDGE_URL"] == "http://judge:8000/v1"
        assert chosen["STREAMEVAL_JUDGE_MODEL"] == env_example()["JUDGE_MODEL"]
    assert env_example()["JUDGE_URL"] == ""
    # The judge runs only under its own profile; the job does not require it.
    assert profiles()["judge"] == {"judge"}
    assert SERVICES["benchmark"]["depends_on"]["judge"]["required"] is False


def test_ports_publish_on_loopback_unless_told_otherwise():
    for name in ("core", "results"):
        (mapping,) = SERVICES[name]["ports"]
        host, outside, inside = interpolate(mapping, {}).split(":")
        assert (host, outside) == ("127.0.0.1", env_example()[f"{name.upper()}_PORT"])
        words = command_words(name)
        assert words[words.index("--port") + 1] == inside
        assert interpolate(mapping, {"BIND_ADDRESS": "0.0.0.0"}).startswith("0.0.0.0:")
    # Only the two APIs are published.
    assert {name for name, service in SERVICES.items() if service.get("ports")} == {
        "core",
        "results",
    }


def test_volumes_and_the_frame_cache():
    named = set(COMPOSE["volumes"])
    for service in SERVICES.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            assert source in named or source.startswith("${"), volume
    assert "pgdata:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    # Whoever samples frames writes them to the cache; the results API reads them back for
    # the dashboard's thumbnails.
    for name, mode in (("core", ""), ("benchmark", ""), ("results", ":ro")):
        cache = SERVICES[name]["environment"]["STREAMEVAL_CACHE_DIR"]
        assert f"cache:{cache}{mode}" in SERVICES[name]["volumes"], name


def test_gpu_lists_give_one_device_each():
    for name, gpus, parallel in (
        ("model", "MODEL_GPUS", "MODEL_TENSOR_PARALLEL"),
        ("judge", "JUDGE_GPUS", "JUDGE_TENSOR_PARALLEL"),
    ):
        (device,) = SERVICES[name]["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
        visible = SERVICES[name]["environment"]["CUDA_VISIBLE_DEVICES"]
        assert interpolate(visible, {gpus: "0,1"}).split(",") == ["0", "1"]
        assert interpolate(visible, {}) == env_example()[gpus]
        words = command_words(name, {parallel: "2"})
        assert words[words.index("--tensor-parallel-size") + 1] == "2"
    for name in ("adapter", "core", "results", "benchmark", "reference-adapter"):
        assert "deploy" not in SERVICES[name]  # no GPU where none is needed


def test_every_variable_has_the_default_env_example_documents():
    text = (REPO / "docker-compose.yml").read_text()
    uses = re.findall(r"(?<!\$)\$\{(\w+)(:?[-+?]?)([^}$]*)", text)
    assert {name for name, _, _ in uses} == set(env_example())
    for name, operator, default in uses:
        # A default everywhere: a user with no .env gets no "variable is not set" warning.
        assert operator in (":-", ":+"), f"${{{name}}} has no default"
        if operator == ":-":
            assert default == env_example()[name], name
    # Shell variables inside health checks are escaped, so Compose leaves them alone.
    assert "$${POSTGRES_USER}" in text


def test_health_check_routes_are_served(tmp_path):
    """The URLs the health checks poll answer 200 on the real apps, without credentials."""
    from streameval.core.launch.control_api import create_app as core_app
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
    # The APIs' checks are readiness (their store answers), not liveness (/healthz).
    assert polled("core") == polled("results") == "/readyz"


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
    # Every folder pyproject.toml maps into the package is copied: `pip install .` in the
    # image needs them all.
    folders = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    copied = {source.rstrip("/") for *sources, _ in copies for source in sources}
    assert set(folders["package-dir"].values()) <= copied, f"{name}: a package folder is missing"


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


def job_env(tmp_path: Path, adapter_url: str, benchmark: Path, **extra: str) -> dict[str, str]:
    """The job's environment as compose gives it (.env.example's values), on a SQLite store."""
    return {
        **os.environ,
        **env_example(),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "STREAMEVAL_STORE": f"sqlite:///{tmp_path / 's.db'}",
        "ADAPTER_URL": adapter_url,
        "BENCHMARK": str(benchmark),
        "RESULTS_DIR": str(tmp_path / "results"),
        **extra,
    }


def run_job(tmp_path: Path, adapter_url: str, benchmark: Path, run_args: str = "", **extra: str):
    env = job_env(tmp_path, adapter_url, benchmark, RUN_ARGS=run_args, **extra)
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


def test_the_job_fails_fast_with_one_line_when_the_adapter_is_not_ready(
    adapter_env, benchmark_path, tmp_path
):
    """Compose starts the job even when an optional dependency is unhealthy: the job waits
    READY_TIMEOUT seconds for the adapter's /healthz, then says so in one line (exit 2)."""
    with AdapterProcess("tests.wire_adapters:NeverReadyAdapter") as adapter:
        done = run_job(tmp_path, adapter.url, benchmark_path, READY_TIMEOUT="1")
        health = f"http://{adapter.host}:{adapter.port}/healthz"
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"benchmark job: the adapter at {health} is not ready after 1 s (READY_TIMEOUT): "
        "HTTP 503 loading"
    ]
    assert done.stdout == "" and not (tmp_path / "s.db").exists()  # no run was started


def test_the_job_waits_for_the_judge_when_one_is_configured(adapter_env, benchmark_path, tmp_path):
    """STREAMEVAL_JUDGE_URL set (compose: JUDGE_URL) and nothing serving it: one line, exit 2,
    before a run that could not be scored starts."""
    with socket.socket() as unused:  # a port nothing listens on: refused
        unused.bind(("127.0.0.1", 0))
        judge = f"http://127.0.0.1:{unused.getsockname()[1]}/v1"
    with AdapterProcess("always") as adapter:
        done = run_job(
            tmp_path, adapter.url, benchmark_path, READY_TIMEOUT="1", STREAMEVAL_JUDGE_URL=judge
        )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"benchmark job: the judge at {judge}/models is not ready after 1 s (READY_TIMEOUT): "
        "[Errno 111] Connection refused"
    ]
    assert not (tmp_path / "s.db").exists()


def test_sigterm_to_the_job_interrupts_its_run_resumably_and_it_exits_143(
    adapter_env, benchmark_path, tmp_path, monkeypatch
):
    """What `docker stop` sends the job (its shell is the container's PID 1): the shell
    passes SIGTERM on to `streameval run`, whose run ends `interrupted` with its sessions
    given back, and exits 143; `streameval run --resume` then finishes the run."""
    gate = tmp_path / "gate"
    monkeypatch.setenv("STREAMEVAL_TEST_GATE", str(gate))
    with AdapterProcess("tests.wire_adapters:GatedAdapter") as adapter:
        env = job_env(tmp_path, adapter.url, benchmark_path, CONCURRENCY="1")
        job = subprocess.Popen(
            ["sh", str(JOB_SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        with Store(env["STREAMEVAL_STORE"]) as store:

            def a_session_runs() -> bool:
                runs = store.list_runs()
                return bool(runs) and "running" in {
                    s.status for s in store.sessions(runs[0].run_id)
                }

            wait_for(a_session_runs, what="a session of the job's run to be running")
            job.send_signal(signal.SIGTERM)
            out, err = job.communicate(timeout=60)
            (run,) = store.list_runs()
            assert job.returncode == 143, err
            assert err.splitlines()[-1] == (
                f"terminated (SIGTERM): resume it with `streameval run --resume {run.run_id}`"
            )
            assert out == ""
            assert run.status == "interrupted"
            assert "running" not in {s.status for s in store.sessions(run.run_id)}
            gate.touch()
            resumed = subprocess.run(
                [sys.executable, "-m", "streameval.cli", "run", "--resume", run.run_id,
                 "--store", env["STREAMEVAL_STORE"], "--json"],
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert resumed.returncode == 0, resumed.stderr
            assert json.loads(resumed.stdout)["status"] == "finished"


def test_ci_builds_every_built_service_on_the_host_network():
    """CI's engine has no default bridge: its override must cover every service it builds."""
    override = yaml.safe_load((REPO / ".ci" / "images" / "compose.ci.yml").read_text())
    built = {name for name, service in SERVICES.items() if "build" in service}
    gpu_only = {name for name, wanted in profiles().items() if wanted and "cpu" not in wanted}
    assert set(override["services"]) == built - gpu_only
    assert all(s == {"build": {"network": "host"}} for s in override["services"].values())

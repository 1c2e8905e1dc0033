"""Least privilege (docs/security.md): adapter URLs and their allow-list, no paths chosen
over the control API, no port-scanner oracle, tokens, docs and health that say nothing about
the server, a background run's crash logged and shown; the compose file's defaults.

The control API runs over a real SQLite store; endpoints are real adapter processes, real
closed ports and a real HTTP server that is not an adapter.
"""

from __future__ import annotations

import http.server
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import text

from streameval.core.config import EndpointConfig, adapter_host_patterns, host_allowed
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.launch.control_api import TokenError, create_app, resolve_token
from streameval.core.launch.control_runs import UNREACHABLE
from streameval.core.store.store import Store
from streameval.scorer.service.api import create_app as results_app
from tests.test_scorer_report import mixed_run
from tests.timeline_fixtures import write_benchmark

REPO = Path(__file__).resolve().parent.parent
TOKEN = "a-long-enough-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The control API with a data root (holding `bench/benchmark.json`, three records) and a
    cache of its own, and the default allow-list."""
    write_benchmark(tmp_path / "data" / "bench")
    monkeypatch.setenv("STREAMEVAL_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("STREAMEVAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("STREAMEVAL_ADAPTER_HOSTS", raising=False)
    monkeypatch.delenv("STREAMEVAL_API_DOCS", raising=False)
    with TestClient(create_app(f"sqlite:///{tmp_path / 's.db'}", TOKEN)) as client:
        yield client


def register(client: TestClient, url: str, name: str = "a") -> Any:
    return client.post("/adapters", json={"name": name, "url": url}, headers=AUTH)


# --------------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ws://user:secret@127.0.0.1:8765/ws", "must not carry credentials (user:password@)"),
        ("ws://token@127.0.0.1:8765/ws", "must not carry credentials (user:password@)"),
        ("http://127.0.0.1:8765/ws", "must be a ws:// or wss:// URL"),
        ("ws://127.0.0.1:8765/admin", "path must be /ws"),
        ("ws://127.0.0.1:8765/?x=1", "path must be /ws"),
        ("ws://127.0.0.1:8765/ws?x=1", "path must be /ws"),
        ("ws://127.0.0.1:99999/ws", "is not a valid URL"),
        ("ws:///ws", "names no host"),
    ],
)
def test_adapter_urls_are_plain_websocket_endpoints(url, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        EndpointConfig(url=url)
    assert EndpointConfig(url="wss://gpu-host:8765/ws").url == "wss://gpu-host:8765/ws"


def test_host_patterns():
    assert adapter_host_patterns("") == ("127.0.0.1", "localhost", "[::1]")
    patterns = adapter_host_patterns(" gpu-*.lab , adapter:8765, [::1] ")
    assert host_allowed("ws://gpu-3.lab:1/ws", patterns)
    assert host_allowed("ws://adapter:8765/ws", patterns)
    assert not host_allowed("ws://adapter:8766/ws", patterns)
    assert host_allowed("ws://[::1]:9/ws", patterns)
    assert not host_allowed("ws://gpu-3.lab.evil.com:1/ws", patterns)
    assert not host_allowed("ws://127.0.0.1:1/ws", patterns)


def test_registered_endpoints_must_be_on_the_allow_list(api, monkeypatch):
    assert register(api, "ws://127.0.0.1:8765/ws").status_code == 201
    assert register(api, "ws://localhost:8765/ws").status_code == 201
    refused = register(api, "ws://169.254.169.254:80/ws")
    assert (refused.status_code, refused.json()["detail"]) == (
        422,
        "adapter endpoint ws://169.254.169.254:80/ws is not on the allowed hosts (127.0.0.1, "
        "localhost, [::1]); the Core's operator allows more in STREAMEVAL_ADAPTER_HOSTS",
    )
    secret = register(api, "ws://me:pw@127.0.0.1:8765/ws")
    assert (secret.status_code, secret.json()["detail"]) == (
        422,
        "url: adapter endpoint must not carry credentials (user:password@)",
    )
    monkeypatch.setenv("STREAMEVAL_ADAPTER_HOSTS", "gpu-*.lab")
    assert register(api, "ws://gpu-1.lab:8765/ws").status_code == 201
    # The list applies to a full config too, not only to registrations.
    config = {"benchmark": "synthetic", "endpoints": [{"url": "ws://10.0.0.1:22/ws"}]}
    started = api.post("/runs", json={"config": config}, headers=AUTH)
    assert started.status_code == 422 and "not on the allowed hosts" in started.json()["detail"]


# --------------------------------------------------------------------------- paths


def test_a_run_started_over_the_api_cannot_choose_paths(api, tmp_path, monkeypatch):
    assert register(api, "ws://127.0.0.1:9/ws").status_code == 201

    def start(**overrides: Any) -> tuple[int, str]:
        answer = api.post("/runs", json={"adapters": ["a"], "overrides": overrides}, headers=AUTH)
        return answer.status_code, answer.json()["detail"]

    no_cache = "cache_dir cannot be set over the API: the Core uses its own (STREAMEVAL_CACHE_DIR)"
    assert start(cache_dir="/etc/cron.d") == (422, no_cache)
    full = {"benchmark": "synthetic", "endpoints": [{"url": "ws://127.0.0.1:9/ws"}]}
    started = api.post("/runs", json={"config": {**full, "cache_dir": "/tmp/x"}}, headers=AUTH)
    assert (started.status_code, started.json()["detail"]) == (422, no_cache)
    assert start(endpoints=[]) == (
        422,
        "overrides cannot set endpoints: name registered adapters",
    )
    outside = tmp_path / "elsewhere.json"
    outside.write_text("{}")
    assert start(benchmark=str(outside)) == (
        422,
        f"benchmark: {str(outside)!r} is not under the data root (STREAMEVAL_DATA_ROOT)",
    )
    assert start(benchmark="../elsewhere.json")[0] == 422
    # A symlink inside the data root that leads out of it is followed, and refused.
    (tmp_path / "data" / "link.json").symlink_to(outside)
    assert start(benchmark="link.json") == (
        422,
        "benchmark: 'link.json' is not under the data root (STREAMEVAL_DATA_ROOT)",
    )
    assert (
        start(video_root="/")[1]
        == "video_root: '/' is not under the data root (STREAMEVAL_DATA_ROOT)"
    )
    # Without a data root only the synthetic benchmark runs.
    monkeypatch.delenv("STREAMEVAL_DATA_ROOT")
    assert start(benchmark="bench.json") == (
        422,
        "benchmark: only the synthetic benchmark can be run over the API unless the Core's "
        "operator sets STREAMEVAL_DATA_ROOT",
    )


# --------------------------------------------------------------------------- no port scanner


class _NotAnAdapter(http.server.BaseHTTPRequestHandler):
    """An HTTP service on an allowed host that is not a streameval adapter: /healthz says
    ok, /info has no `conditions`."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"ok" if self.path == "/healthz" else b'{"adapter": "something else"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def not_an_adapter() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotAnAdapter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unusable_endpoint_is_one_answer_whatever_listens_there(api, not_an_adapter):
    """A closed port, an open port that is not an adapter and an /info without conditions
    (a 500 before) give the same 422, each no sooner than the connect timeout."""
    ports = {"closed": _closed_port(), "not-an-adapter": not_an_adapter}
    answers = {}
    for name, port in ports.items():
        url = f"ws://127.0.0.1:{port}/ws"
        assert register(api, url, name).status_code == 201
        began = time.monotonic()
        started = api.post(
            "/runs",
            json={
                "adapters": [name],
                "overrides": {"benchmark": "bench/benchmark.json", "connect_timeout_s": 1.0},
            },
            headers=AUTH,
        )
        answers[name] = (started.status_code, started.json()["detail"].replace(str(port), "P"))
        assert time.monotonic() - began >= 1.0, name
    assert (
        answers["closed"]
        == answers["not-an-adapter"]
        == (422, f"{UNREACHABLE}: ws://127.0.0.1:P/ws")
    )


# --------------------------------------------------------------------------- tokens and docs


def test_a_non_ascii_bearer_token_is_a_401_not_a_500(api):
    for credentials in ("Bearer ünïcödé", "Bearer " + "é" * 40, "Basic abc"):
        # Sent as UTF-8 bytes, as a client may: the server sees non-ASCII characters.
        answer = api.get("/adapters", headers={"Authorization": credentials.encode()})
        assert answer.status_code == 401, credentials
    assert api.get("/adapters", headers=AUTH).status_code == 200


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("change-me", "STREAMEVAL_API_TOKEN is the example token 'change-me'"),
        ("short-token", "STREAMEVAL_API_TOKEN has 11 characters; it needs at least 16"),
    ],
)
def test_a_guessable_token_is_refused(value, problem, monkeypatch):
    monkeypatch.setenv("STREAMEVAL_API_TOKEN", value)
    with pytest.raises(TokenError, match=problem):
        resolve_token()


def test_no_token_makes_up_a_random_one(monkeypatch):
    monkeypatch.delenv("STREAMEVAL_API_TOKEN", raising=False)
    first, generated = resolve_token()
    assert generated and len(first) >= 16 and first != resolve_token()[0]
    monkeypatch.setenv("STREAMEVAL_API_TOKEN", TOKEN)
    assert resolve_token() == (TOKEN, False)


def test_core_api_refuses_to_start_with_the_example_token(tmp_path):
    env = {**os.environ, "STREAMEVAL_API_TOKEN": "change-me"}
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "core-api", "--port", str(_closed_port()),
         "--store", f"sqlite:///{tmp_path / 's.db'}"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    output = (done.stdout + done.stderr).strip().splitlines()
    assert len(output) == 1 and "example token 'change-me'" in output[0], output


def test_docs_and_schema_are_off_unless_asked_for(tmp_path, monkeypatch, api):
    for path in ("/docs", "/openapi.json", "/redoc", "/docs-assets/swagger-ui.css"):
        assert api.get(path).status_code == 404
        assert api.get(path, headers=AUTH).status_code == 404
    health = api.get("/healthz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    monkeypatch.setenv("STREAMEVAL_API_DOCS", "1")
    with TestClient(create_app(f"sqlite:///{tmp_path / 'd.db'}", TOKEN)) as documented:
        assert documented.get("/openapi.json").status_code == 200
        assert documented.get("/docs").status_code == 200
        assert documented.get("/adapters").status_code == 401


# --------------------------------------------------------------------------- the results API


def test_the_results_api_names_no_path(tmp_path):
    store_path = tmp_path / "secret-place" / "store.db"
    store_path.parent.mkdir()
    url = f"sqlite:///{store_path}"
    with Store(url) as store:
        mixed_run(store, "run-a")
    with TestClient(results_app(url)) as client:
        answers = [
            client.get("/healthz"),
            client.get("/runs/nope"),
            client.get("/runs/nope/metrics"),
            client.get("/runs/run-a/records/nope"),
            client.get("/runs/run-a/records/qa-1/frames/0"),
        ]
        assert answers[0].json() == {"status": "ok"}
        assert answers[1].json() == {"detail": "unknown run id 'nope'"}
        assert [a.status_code for a in answers] == [200, 404, 404, 404, 404]
        for answer in answers:
            assert "secret-place" not in answer.text and str(tmp_path) not in answer.text


# --------------------------------------------------------------------------- background crash


def test_a_background_runs_crash_is_logged_and_shown_as_failed(api, tmp_path, adapter_env, caplog):
    """The store refuses to mark the run running (a real SQLite trigger): the background
    task crashes; GET /runs/{id} says failed, and why, and the log has it."""
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    with Store(store_url) as store, store.engine.begin() as conn:
        conn.execute(
            text(
                "CREATE TRIGGER no_running BEFORE UPDATE OF status ON runs "
                "WHEN NEW.status = 'running' BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        )
    with AdapterProcess("always") as adapter, caplog.at_level(logging.ERROR, "streameval"):
        assert register(api, adapter.url).status_code == 201
        started = api.post(
            "/runs",
            json={"adapters": ["a"], "overrides": {"benchmark": "bench/benchmark.json"}},
            headers=AUTH,
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        deadline = time.monotonic() + 60
        while (status := api.get(f"/runs/{run_id}", headers=AUTH).json())["status"] in (
            "created",
            "running",
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert status["status"] == "failed"
    assert status["reason"].startswith("StoreError: ") and "disk on fire" in status["reason"]
    assert "\n" not in status["reason"]
    logged = [r for r in caplog.records if r.name == "streameval.core.launch.control_api"]
    assert logged and logged[0].getMessage() == f"run {run_id} crashed: {status['reason']}"
    with Store(store_url) as store:
        assert store.get_run(run_id).status == "failed"


# --------------------------------------------------------------------------- compose


def test_compose_publishes_on_loopback_and_ships_no_token():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    core = compose["services"]["core"]
    environment = core["environment"]
    assert environment["STREAMEVAL_API_TOKEN"] == "${STREAMEVAL_API_TOKEN:-}"
    for name in ("core", "results"):
        (port,) = compose["services"][name]["ports"]
        assert port.startswith("${BIND_ADDRESS:-127.0.0.1}:")
    # The health check uses readiness, served without a token; the schema is not served.
    assert "/readyz" in " ".join(core["healthcheck"]["test"])
    hosts = adapter_host_patterns(environment["STREAMEVAL_ADAPTER_HOSTS"].split(":-")[1][:-1])
    job_url = compose["services"]["benchmark"]["environment"]["ADAPTER_URL"]
    for url in (job_url, "ws://reference-adapter:8765/ws"):  # the README's registration
        assert host_allowed(url, hosts), url
    assert environment["STREAMEVAL_DATA_ROOT"] == "/data"
    # What the data root holds: the benchmark and video folders, mounted read-only.
    for folder in ("/data/benchmark", "/data/videos"):
        assert any(volume.endswith(f"}}:{folder}:ro") for volume in core["volumes"]), folder

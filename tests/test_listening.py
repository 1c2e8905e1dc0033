"""Every server says where it listens (issue 15): `results-api`, `core-api` and the adapters
(`streameval adapter serve`, `python -m streameval.adapters`) print one "listening on URL"
line once their socket listens, with the port the OS chose for port 0, and the URL they name
answers. An adapter names its session URL, ws://HOST:PORT/ws, and `streameval run` takes it
with or without the /ws."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from streameval.core.config import EndpointConfig
from streameval.core.store.store import Store
from streameval.listening import listening_line, server_url
from tests.servers import served, streameval_command

pytestmark = pytest.mark.timeout(180)
TOKEN = "listening-test-token-0123456789"
PORT = r"[1-9][0-9]*"  # never 0: the line names the port the OS chose


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).close()  # the results API opens an existing store only
    return url


def port_of(url: str) -> int:
    return int(re.search(r":(\d+)(/|$)", url)[1])


# --------------------------------------------------------------------------- HTTP APIs


def test_results_api_names_the_url_it_listens_on(store_url: str) -> None:
    command = streameval_command("results-api", "--store", store_url, "--port", "0")
    with served(command) as server:
        assert re.fullmatch(rf"results API listening on http://127\.0\.0\.1:{PORT}", server.line)
        assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{server.url}/runs").json()["total"] == 0


def test_core_api_names_the_url_it_listens_on(store_url: str) -> None:
    env = {**os.environ, "STREAMEVAL_API_TOKEN": TOKEN}
    command = streameval_command("core-api", "--store", store_url, "--port", "0")
    with served(command, env) as server:
        assert re.fullmatch(rf"control API listening on http://127\.0\.0\.1:{PORT}", server.line)
        listed = httpx.get(f"{server.url}/adapters", headers={"Authorization": f"Bearer {TOKEN}"})
        assert (listed.status_code, listed.json()) == (200, [])


def test_all_interfaces_are_named_with_a_url_a_user_can_open(store_url: str) -> None:
    command = streameval_command(
        "results-api", "--store", store_url, "--host", "0.0.0.0", "--port", "0"
    )
    with served(command) as server:
        assert re.fullmatch(
            rf"results API listening on all interfaces \(0\.0\.0\.0\): "
            rf"http://127\.0\.0\.1:{PORT}",
            server.line,
        )
        assert httpx.get(f"{server.url}/healthz").status_code == 200


@pytest.mark.parametrize("command", ["results-api", "core-api"])
def test_a_busy_port_is_one_line(command: str, store_url: str) -> None:
    env = {**os.environ, "STREAMEVAL_API_TOKEN": TOKEN}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            streameval_command(command, "--store", store_url, "--port", str(port)),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use\n",
    )


# --------------------------------------------------------------------------- adapters


@pytest.mark.parametrize(
    "command",
    [
        streameval_command("adapter", "serve", "reference", "--port", "0"),
        [sys.executable, "-m", "streameval.adapters", "reference", "--port", "0"],
    ],
    ids=["streameval adapter serve", "python -m streameval.adapters"],
)
def test_an_adapter_names_its_session_url(command: list[str]) -> None:
    with served(command) as adapter:
        assert re.fullmatch(
            rf"streameval-adapter listening on ws://127\.0\.0\.1:{PORT}/ws", adapter.line
        )
        with connect(adapter.url) as session:  # the WebSocket handshake of a session
            assert session.request.path == "/ws"
        health = httpx.get(f"http://127.0.0.1:{port_of(adapter.url)}/healthz")
        assert (health.status_code, health.text) == (200, "ok\n")


def test_an_adapter_on_all_interfaces_names_a_url_a_user_can_open() -> None:
    command = streameval_command("adapter", "serve", "reference", "--host", "0.0.0.0")
    with served([*command, "--port", "0"]) as adapter:
        assert re.fullmatch(
            rf"streameval-adapter listening on all interfaces \(0\.0\.0\.0\): "
            rf"ws://127\.0\.0\.1:{PORT}/ws",
            adapter.line,
        )
        with connect(adapter.url) as session:
            assert session.request.path == "/ws"


def test_run_takes_an_adapter_url_without_ws(store_url: str) -> None:
    """Forgetting /ws must not fail every session: every adapter serves sessions at /ws."""
    with served(streameval_command("adapter", "serve", "reference", "--port", "0")) as adapter:
        bare = adapter.url.removesuffix("/ws")
        done = subprocess.run(
            streameval_command("run", "--adapter-url", bare, "--limit", "2", "--json")
            + ["--store", store_url],
            capture_output=True,
            text=True,
            timeout=150,
        )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    counts = {key: summary[key] for key in ("status", "sessions", "finished", "failed")}
    assert counts == {"status": "finished", "sessions": 2, "finished": 2, "failed": 0}
    with Store(store_url) as store:
        (endpoint,) = store.get_run(summary["run_id"]).config["endpoints"]
    assert endpoint["url"] == f"{bare}/ws"


@pytest.mark.parametrize("given", ["ws://127.0.0.1:8765", "ws://127.0.0.1:8765/"])
def test_an_endpoint_without_a_path_means_ws(given: str) -> None:
    assert EndpointConfig(url=given).url == "ws://127.0.0.1:8765/ws"


# --------------------------------------------------------------------------- the line


def test_the_line_for_each_kind_of_host() -> None:
    assert listening_line("x", "http", "localhost", 8800) == "x listening on http://localhost:8800"
    assert listening_line("x", "ws", "::1", 9, "/ws") == "x listening on ws://[::1]:9/ws"
    assert listening_line("x", "http", "::", 1) == (
        "x listening on all interfaces (::): http://[::1]:1"
    )
    assert server_url("http", "0.0.0.0", 5) == "http://127.0.0.1:5"

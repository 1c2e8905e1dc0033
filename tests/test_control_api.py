"""The control API: bearer token, adapter registry, starting and following a run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.launch.control_api import create_app
from streameval.core.store.store import Store
from tests.timeline_fixtures import write_benchmark

TOKEN = "s3cret-token"


@pytest.fixture(autouse=True)
def confined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs started over the API read benchmarks under the data root only and use the
    Core's own cache (docs/security.md): both are the test's."""
    monkeypatch.setenv("STREAMEVAL_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("STREAMEVAL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("STREAMEVAL_ADAPTER_HOSTS", raising=False)


def run_to_the_end(client: TestClient, benchmark: Path) -> dict[str, Any]:
    """Start a run on the registered `always` adapter and poll it until it ends."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    started = client.post(
        "/runs",
        json={"adapters": ["always"], "overrides": {"benchmark": str(benchmark)}},
        headers=auth,
    )
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    deadline = time.monotonic() + 60
    while True:
        status = client.get(f"/runs/{run_id}", headers=auth).json()
        if status["status"] not in ("created", "running") or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def test_every_route_needs_the_bearer_token(tmp_path):
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", TOKEN)
    with TestClient(app) as client:
        assert client.get("/adapters").status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert client.get("/adapters", headers=wrong).status_code == 401
        assert client.post("/runs", json={}, headers=wrong).status_code == 401


def test_register_an_adapter_start_a_run_and_follow_it(tmp_path):
    benchmark = write_benchmark(tmp_path / "bench")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", TOKEN)
    with AdapterProcess("always") as adapter, TestClient(app) as client:
        bad = client.post("/adapters", json={"name": "x", "url": "http://nope"}, headers=auth)
        assert bad.status_code == 422
        registered = client.post(
            "/adapters",
            json={"name": "always", "url": adapter.url, "concurrency": 2},
            headers=auth,
        )
        assert registered.status_code == 201
        assert client.get("/adapters", headers=auth).json() == [
            {"name": "always", "url": adapter.url, "concurrency": 2}
        ]
        unknown = client.post("/runs", json={"adapters": ["nobody"]}, headers=auth)
        assert unknown.status_code == 422 and "nobody" in unknown.json()["detail"]

        status = run_to_the_end(client, benchmark)
        assert status["status"] == "finished"
        assert status["sessions"] == {"finished": 3}
        assert len(status["config_hash"]) == 64
        assert client.get("/runs/nope", headers=auth).status_code == 404


def test_registered_adapters_survive_a_restart_of_the_api(tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMEVAL_ADAPTER_HOSTS", "127.0.0.1,*.invalid")
    benchmark = write_benchmark(tmp_path / "bench")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess("always") as adapter:
        with TestClient(create_app(store_url, TOKEN)) as first:
            for url, concurrency in (("ws://127.0.0.1:1/ws", 1), (adapter.url, 3)):
                registered = first.post(
                    "/adapters",
                    json={"name": "always", "url": url, "concurrency": concurrency},
                    headers=auth,
                )
                assert registered.status_code == 201, registered.text
            other = {"name": "b.other-1", "url": "wss://example.invalid/ws", "concurrency": 1}
            assert first.post("/adapters", json=other, headers=auth).status_code == 201

        with TestClient(create_app(store_url, TOKEN)) as second:
            assert second.get("/adapters", headers=auth).json() == [
                {"name": "always", "url": adapter.url, "concurrency": 3},
                other,
            ]
            status = run_to_the_end(second, benchmark)
            run_id = status["run_id"]
            assert status["status"] == "finished"
            assert status["sessions"] == {"finished": 3}
    with Store(store_url) as store:
        assert store.get_run(run_id).config["endpoints"] == [{"url": adapter.url, "concurrency": 3}]
        assert {s.endpoint for s in store.sessions(run_id)} == {adapter.url}


def test_a_store_failure_is_a_one_line_503(tmp_path):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    with TestClient(create_app(store_url, TOKEN)) as client:
        with Store(store_url) as store, store.engine.begin() as conn:
            conn.execute(text("DROP TABLE adapter_endpoints"))
        listed = client.get("/adapters", headers=auth)
        assert (listed.status_code, listed.json()) == (
            503,
            {"detail": "the store is unavailable"},
        )
        registered = client.post(
            "/adapters", json={"name": "a", "url": "ws://127.0.0.1:1/ws"}, headers=auth
        )
        assert (registered.status_code, registered.json()) == (
            503,
            {"detail": "the store is unavailable"},
        )
        started = client.post("/runs", json={"adapters": ["a"]}, headers=auth)
        assert started.status_code == 503

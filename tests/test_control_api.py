"""The control API: bearer token, adapter registry, starting and following a run."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from streameval.core.adapter_process import AdapterProcess
from streameval.core.api import create_app
from tests.timeline_fixtures import write_benchmark

TOKEN = "s3cret-token"


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

        started = client.post(
            "/runs",
            json={
                "adapters": ["always"],
                "overrides": {"benchmark": str(benchmark), "cache_dir": str(tmp_path / "c")},
            },
            headers=auth,
        )
        assert started.status_code == 202, started.text
        run_id = started.json()["run_id"]
        deadline = time.monotonic() + 60
        while True:
            status = client.get(f"/runs/{run_id}", headers=auth).json()
            if status["status"] == "finished" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert status["status"] == "finished"
        assert status["sessions"] == {"finished": 3}
        assert len(status["config_hash"]) == 64
        assert client.get("/runs/nope", headers=auth).status_code == 404

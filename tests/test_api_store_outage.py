"""Both HTTP APIs while their PostgreSQL store is down, for real: the results API and the
Core's control API as processes, the test server stopped under them. Every request that
needs the store is a 503 within a second (not a hang), `/readyz` says 503 while `/healthz`
stays 200, and both serve again once the server is back (streameval/web_readiness.py).
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from streameval.core.store.store import Store
from streameval.web_readiness import STORE_UNAVAILABLE
from tests.faults import start_postgres, stop_postgres
from tests.servers import served, streameval_command

TOKEN = "outage-test-token-0123456789"
# (command, a route that reads the store) for each API.
APIS = {
    "results-api": ("results-api", "/runs"),
    "core-api": ("core-api", "/adapters"),
}
# What the issue asks: an answer within a second, never the store's 60 s retry budget.
ANSWER_WITHIN_S = 1.0

pytestmark = pytest.mark.postgres


def timed_get(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    return response, time.monotonic() - started


@pytest.mark.parametrize("api", sorted(APIS))
def test_an_api_answers_503_within_a_second_while_postgresql_is_down(api, pg_database):
    url, data = pg_database
    Store(url).close()  # the schema: the results API opens its store read-only
    command, route = APIS[api]
    env = {**os.environ, "STREAMEVAL_API_TOKEN": TOKEN}
    with served(streameval_command(command, "--store", url, "--port", "0"), env) as server:
        base = server.url.rstrip("/")
        assert timed_get(f"{base}{route}")[0].status_code == 200
        assert timed_get(f"{base}/readyz")[0].json() == {"status": "ready"}
        stop_postgres(data)
        try:
            # Every request while it is down, not only the first after the connections broke.
            for _ in range(3):
                response, took = timed_get(f"{base}{route}")
                assert response.status_code == 503, response.text
                assert took < ANSWER_WITHIN_S, f"{route} answered 503 after {took:.2f} s"
                assert url not in response.text and "127.0.0.1" not in response.text
            ready, took = timed_get(f"{base}/readyz")
            assert (ready.status_code, ready.json()) == (503, {"detail": STORE_UNAVAILABLE})
            assert took < ANSWER_WITHIN_S, f"/readyz answered after {took:.2f} s"
            health = timed_get(f"{base}/healthz")[0]
            assert (health.status_code, health.json()) == (200, {"status": "ok"})
        finally:
            start_postgres(data, url)
        assert timed_get(f"{base}{route}")[0].status_code == 200
        assert timed_get(f"{base}/readyz")[0].json() == {"status": "ready"}

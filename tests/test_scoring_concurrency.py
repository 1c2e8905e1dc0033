"""The results API scores one (run, profile) at a time, never the whole API: while run A
scores, /metrics of run B answers; two requests for A score it once.

A real uvicorn server on a loopback port, over a real SQLite store with two runs; the
scoring of run A is made slow for real by holding it at a gate until the test opens it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import uvicorn

from streameval.core.store.store import Store
from streameval.scorer.service import api as results_api
from streameval.scorer.service import score_cache
from streameval.scorer.service.routes.params import DEFAULT_PROFILE
from tests.test_scorer_report import mixed_run

GATE_TIMEOUT_S = 30.0


class SlowScoring:
    """score_run, held for run A under the default profile until the gate opens (and
    counted per run and profile)."""

    def __init__(self) -> None:
        self.real = score_cache.score_run
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def __call__(self, store, run_id, profile, judge):
        with self._lock:
            self.calls[run_id, profile] = self.calls.get((run_id, profile), 0) + 1
        if (run_id, profile) == ("run-a", DEFAULT_PROFILE):
            self.entered.set()
            assert self.gate.wait(GATE_TIMEOUT_S), "the test never released run A"
        return self.real(store, run_id, profile, judge)


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> SlowScoring:
    scoring = SlowScoring()
    monkeypatch.setattr(score_cache, "score_run", scoring)
    return scoring


@pytest.fixture
def server(tmp_path: Path, slow: SlowScoring) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        mixed_run(store, "run-a")
        mixed_run(store, "run-b", answers=("C", "The answer is B", "B"), said="one")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(results_api.create_app(url), host="127.0.0.1", port=port)
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not running.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        slow.gate.set()
        running.should_exit = True
        thread.join(30)


def test_other_runs_answer_while_one_scores(server: str, slow: SlowScoring) -> None:
    with ThreadPoolExecutor(1) as pool:
        scoring_a = pool.submit(httpx.get, f"{server}/runs/run-a/metrics", timeout=60)
        assert slow.entered.wait(GATE_TIMEOUT_S)
        # With one global lock this waited for A (and timed out); now it answers at once.
        b = httpx.get(f"{server}/runs/run-b/metrics", timeout=10)
        assert b.status_code == 200 and b.json()["run_id"] == "run-b"
        assert not scoring_a.done()  # A was still being scored all along
        slow.gate.set()
        a = scoring_a.result(60)
    assert a.status_code == 200 and a.json()["run_id"] == "run-a"
    assert slow.calls == {("run-a", "trace-paper-v1"): 1, ("run-b", "trace-paper-v1"): 1}


def test_the_same_run_and_profile_is_scored_once(server: str, slow: SlowScoring) -> None:
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(httpx.get, f"{server}/runs/run-a/metrics", timeout=60)
        assert slow.entered.wait(GATE_TIMEOUT_S)
        second = pool.submit(httpx.get, f"{server}/runs/run-a/metrics", timeout=60)
        records = pool.submit(httpx.get, f"{server}/runs/run-a/records", timeout=60)
        # Another profile of the same run is another pair: not held up by the first.
        other = httpx.get(f"{server}/runs/run-a/metrics?profile=realstream", timeout=10)
        assert other.status_code == 200 and other.json()["profile"]["name"] == "realstream"
        slow.gate.set()
        answers = [future.result(60) for future in (first, second, records)]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert answers[0].json() == answers[1].json()
    assert slow.calls[("run-a", "trace-paper-v1")] == 1

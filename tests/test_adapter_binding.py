"""Binding an adapter to a run is serialized (issue 33, item 6): two Cores admitting
different adapters to one detached run at the same instant cannot both pass the identity
check.

Two threads, each with its own Store (its own connections) on a real SQLite file and a real
PostgreSQL database, admit their endpoint to a run created with no adapter (as `run
--detach` makes it). Both are held after reading the run's conditions and before writing
them (a barrier in the identity check), so their read-modify-writes overlap every time.
Exactly one binds its adapter; the other is refused with the line a resume with a changed
adapter gets, and the run lists the winner's adapter alone.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.run import endpoint_admission
from streameval.core.run.endpoint_admission import EndpointAdmission
from streameval.core.run.errors import RunError
from streameval.core.store.store import Store

ADAPTERS = {
    "alpha": ("ws://127.0.0.1:9001/ws", {"model_name": "model-a"}),
    "beta": ("ws://127.0.0.1:9002/ws", {"model_name": "model-b"}),
}


def info(name: str) -> dict:
    return {"adapter": name, "adapter_version": "1.0", "conditions": ADAPTERS[name][1]}


def refusal(winner: str, loser: str) -> str:
    url = ADAPTERS[loser][0]
    return (
        f"run r used adapter {winner} 1.0 (model-{winner[0]}) but {url} serves {loser} 1.0 "
        f"(model-{loser[0]}) (adapter {winner} -> {loser}, conditions.model_name "
        f"model-{winner[0]} -> model-{loser[0]}); pass --allow-adapter-change to resume with "
        "a different adapter on purpose"
    )


@pytest.fixture
def both_read_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thread's first identity check waits until the other thread has read the run's
    conditions too: the two bindings overlap between read and write."""
    barrier = threading.Barrier(2, timeout=30)
    waited = threading.local()
    identity = endpoint_admission.adapter_identity

    def meeting_first(adapter: dict) -> dict:
        if not getattr(waited, "done", False):
            waited.done = True
            barrier.wait()
        return identity(adapter)

    monkeypatch.setattr(endpoint_admission, "adapter_identity", meeting_first)


def bind(store: Store, name: str) -> str | None:
    """Admit adapter `name` to run r like a worker's Core; the refusal's line, if any."""
    config = RunConfig(benchmark="synthetic", endpoints=[EndpointConfig(url=ADAPTERS[name][0])])
    try:
        EndpointAdmission(config, store).check_identities("r", [info(name)], False)
    except RunError as exc:
        return str(exc)
    return None


def test_two_adapters_bound_at_once_one_wins(store_url, both_read_first):
    # Opened one after the other: Alembic's migration context is global to a process.
    with Store(store_url) as first, Store(store_url) as second:
        first.create_run("r", "b", {}, {"adapters": []})
        with ThreadPoolExecutor(2) as pool:
            outcomes = dict(zip(ADAPTERS, pool.map(bind, [first, second], ADAPTERS), strict=True))
        bound = first.get_run("r").conditions["adapters"]
    assert len(bound) == 1, bound
    winner = bound[0]["adapter"]
    loser = "beta" if winner == "alpha" else "alpha"
    assert bound == [{**info(winner), "endpoint": ADAPTERS[winner][0]}]
    assert outcomes == {winner: None, loser: refusal(winner, loser)}

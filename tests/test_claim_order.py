"""The order in which workers claim a run's sessions, on a real SQLite file and a real
PostgreSQL database (issue 35, item 2): a session whose worker died is taken before any
pending one, and `SessionQueue.upcoming` lists what claims would take, in their order,
claiming nothing."""

from __future__ import annotations

import time

from pydantic import TypeAdapter

from streameval.core.benchmark.records import Record
from streameval.core.config import PROTOCOL_PROFILES, RunConfig
from streameval.core.run.session_timeline import expected_stream_s
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.store import Store
from tests.test_scale_out import detached_run


def queue(store: Store, name: str, lease_s: float = 60.0) -> SessionQueue:
    return SessionQueue(store, WorkerIdentity(name, "here"), lease_s)


def expire_one(store: Store, run_id: str) -> str:
    """Claim the first session under a lease that runs out at once (its worker 'died')."""
    dead = queue(store, "dead", lease_s=0.01)
    session = dead.claim(run_id)
    time.sleep(0.05)
    return session.session_id


def test_an_expired_lease_is_claimed_before_every_pending_session(store):
    store.create_run("r", benchmark="none", config={})
    store.add_sessions("r", [(s, [s]) for s in ("a", "b", "c")])
    assert expire_one(store, "r") == "a"
    live = queue(store, "live")
    taken = [live.claim("r") for _ in range(3)]
    assert [(s.session_id, s.attempt) for s in taken] == [("a", 1), ("b", 0), ("c", 0)]
    assert live.claim("r") is None


def test_upcoming_lists_what_claims_take_in_their_order_and_claims_nothing(store):
    store.create_run("r", benchmark="none", config={})
    store.add_sessions("r", [(s, [s]) for s in ("a", "b", "c", "d")])
    expire_one(store, "r")
    live = queue(store, "live")
    assert live.claim("r").session_id == "a"  # the expired one, retaken
    expire_one(store, "r")  # "b" now expired as well
    listed = live.upcoming("r", 10)
    assert [(s.session_id, s.status) for s in listed] == [
        ("b", "running"),
        ("c", "pending"),
        ("d", "pending"),
    ]
    assert [s.session_id for s in live.upcoming("r", 2)] == ["b", "c"]
    assert live.upcoming("r", 0) == []
    assert [s.session_id for s in live.upcoming(None, 10)] == ["b", "c", "d"]
    claimed = [live.claim("r").session_id for _ in range(3)]
    assert claimed == ["b", "c", "d"]
    assert live.upcoming("r", 10) == []


def test_upcoming_follows_the_runs_in_the_order_claims_take_them(store):
    store.create_run("first", benchmark="none", config={})
    store.create_run("second", benchmark="none", config={})
    store.add_sessions("second", [("x", ["x"])])
    store.add_sessions("first", [("y", ["y"]), ("z", ["z"])])
    store.set_run_status("second", "running")
    live = queue(store, "live")
    listed = [(s.run_id, s.session_id) for s in live.upcoming(None, 3)]
    assert listed == [("first", "y"), ("first", "z"), ("second", "x")]
    assert [(s.run_id, s.session_id) for s in live.upcoming(None, 2)] == listed[:2]
    store.set_run_status("first", "finished")  # a finished run takes no claims
    assert [(s.run_id, s.session_id) for s in live.upcoming(None, 3)] == [("second", "x")]
    assert live.upcoming("first", 3) == []


def test_claims_take_the_longest_session_first_ties_by_id(store):
    store.create_run("r", benchmark="none", config={})
    expected = {"a": 5.0, "b": 60.0, "c": 5.0, "d": 900.0, "e": 0.5}
    store.add_sessions("r", [(s, [s]) for s in expected], expected_s=expected)
    live = queue(store, "live")
    assert [s.session_id for s in live.upcoming("r", 10)] == ["d", "b", "a", "c", "e"]
    taken = [live.claim("r") for _ in range(5)]
    assert [(s.session_id, s.expected_s) for s in taken] == [
        ("d", 900.0),
        ("b", 60.0),
        ("a", 5.0),
        ("c", 5.0),
        ("e", 0.5),
    ]


def test_an_expired_short_session_goes_before_a_long_pending_one(store):
    store.create_run("r", benchmark="none", config={})
    expected = {"long": 100.0, "mid": 50.0, "short": 1.0}
    store.add_sessions("r", [(s, [s]) for s in expected], expected_s=expected)
    dead = queue(store, "dead")
    assert [dead.claim("r").session_id for _ in range(2)] == ["long", "mid"]
    assert expire_one(store, "r") == "short"  # held by "dead" too, its lease ran out
    dead.release("r", "long")  # given back as pending: a new attempt
    dead.release("r", "mid")
    live = queue(store, "live")
    taken = [live.claim("r") for _ in range(3)]
    assert [(s.session_id, s.attempt) for s in taken] == [("short", 1), ("long", 1), ("mid", 1)]


def test_a_new_run_stores_each_sessions_streamed_seconds_and_claims_the_longest_first(
    tmp_path,
):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    run_id = detached_run(url, "--limit", "8")
    with Store(url) as store:
        config = RunConfig.model_validate(store.get_run(run_id).config).resolved()
        records = [TypeAdapter(Record).validate_python(r) for r in store.records(run_id)]
        stored = {s.session_id: s.expected_s for s in store.sessions(run_id)}
        order = [s.session_id for s in queue(store, "live").upcoming(run_id, 10)]
    profile = PROTOCOL_PROFILES[config.profile]
    assert stored == {r.record_id: expected_stream_s(r, config, profile) for r in records}
    assert len(set(stored.values())) > 1 and min(stored.values()) > 0
    assert order == sorted(stored, key=lambda sid: (-stored[sid], sid))

"""Numbers you can trust: a resume cannot silently switch adapters, a run whose sessions
failed says so in its status and exit code, infrastructure failures are told apart from the
adapter's and the input's, and only those are retried. Real adapter processes, the real CLI,
a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from streameval.core.benchmark.records import QARecord
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.run.runner import RunExecutor
from streameval.core.run.sessions_to_run import session_failure_cause
from streameval.core.store.store import SessionInfo, Store
from streameval.events import EventKind, failure_cause
from tests.integrity_adapters import CRASH_AT_ENV
from tests.test_cli import streameval
from tests.timeline_fixtures import PROACTIVE, QA, QA_EARLY, write_benchmark


def common(tmp_path: Path) -> list[str]:
    return ["--store", f"sqlite:///{tmp_path / 's.db'}", "--cache-dir", str(tmp_path / "cache")]


def listed_runs(tmp_path: Path) -> dict[str, dict]:
    done = streameval("runs", "--json", "--store", f"sqlite:///{tmp_path / 's.db'}")
    assert done.returncode == 0, done.stderr
    return {run["run_id"]: run for run in json.loads(done.stdout)}


def broken_video_benchmark(root: Path, records: list, like: QARecord = QA) -> Path:
    """The test benchmark plus a QA record like `like` whose video is not a video (an input
    failure)."""
    broken = like.model_copy(update={"record_id": "t:qa:bad", "video_path": "broken.mp4"})
    path = write_benchmark(root, records=(*records, broken))
    (root / "broken.mp4").write_bytes(b"this is not a video")
    return path


# ------------------------------------------------------------------ adapter identity


def test_resume_against_a_different_adapter_is_refused_unless_allowed(
    adapter_env, benchmark_path, tmp_path
):
    url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess("silent") as silent, Store(url) as store:
        config = RunConfig(
            benchmark=str(benchmark_path),
            endpoints=[EndpointConfig(url=silent.url, concurrency=2)],
            cache_dir=str(tmp_path / "cache"),
        )
        # A run declared against `silent` whose sessions never ran (all pending).
        run_id = asyncio.run(RunExecutor(config, store).prepare())
        assert [a["adapter"] for a in store.get_run(run_id).conditions["adapters"]] == ["silent"]

    with AdapterProcess("always") as always:
        refused = streameval(
            "run", "--resume", run_id, "--adapter-url", always.url, *common(tmp_path)
        )
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in refused.stderr, lines
        line = lines[0]
        assert line.startswith("error: run " + run_id), line
        assert "silent 1 (baseline-silent)" in line and "always 1 (baseline-always)" in line
        assert "adapter silent -> always" in line
        assert "conditions.model_name baseline-silent -> baseline-always" in line
        assert "--allow-adapter-change" in line
        with Store(url) as store:  # nothing was touched
            assert {s.status for s in store.sessions(run_id)} == {"pending"}
            assert store.count_events(run_id) == 0
            assert len(store.get_run(run_id).conditions["adapters"]) == 1

        allowed = streameval(
            "run", "--resume", run_id, "--adapter-url", always.url,
            "--allow-adapter-change", "--json", *common(tmp_path),
        )  # fmt: skip
    assert allowed.returncode == 0, allowed.stderr
    summary = json.loads(allowed.stdout)
    assert (summary["finished"], summary["failed"], summary["status"]) == (3, 0, "finished")

    run = listed_runs(tmp_path)[run_id]
    assert run["adapters"] == ["silent 1 (baseline-silent)", "always 1 (baseline-always)"]
    assert [(i["adapter"], i["endpoints"]) for i in run["adapter_identities"]] == [
        ("silent", [silent.url]),
        ("always", [always.url]),
    ]
    with Store(url) as store:
        recorded = store.get_run(run_id).conditions["adapters"]
        assert [(a["adapter"], a["endpoint"]) for a in recorded] == [
            ("silent", silent.url),
            ("always", always.url),
        ]
        # Each session says which adapter served it: its hello, in the sessions table.
        for session in store.sessions(run_id):
            assert session.endpoint == always.url
            assert session.adapter["adapter"] == "always"
            assert session.adapter["conditions"]["model_name"] == "baseline-always"
            hello = next(e for e in store.iter_events(run_id, session.session_id))
            assert hello.kind == EventKind.ADAPTER_HELLO
            assert hello.payload.model_dump(mode="json") == session.adapter

    table = streameval("runs", "--store", url, env={**os.environ, "COLUMNS": "200"})
    row = [line for line in table.stdout.splitlines() if run_id in line]
    assert len(row) == 1 and "silent 1 (baseline-silent)" in row[0], table.stdout
    following = table.stdout.splitlines()[table.stdout.splitlines().index(row[0]) + 1]
    assert "always 1 (baseline-always)" in following


def test_the_adapter_flags_need_a_resume(tmp_path):
    for flag in ("--retry-failed", "--allow-adapter-change"):
        done = streameval("run", "--adapter-url", "ws://127.0.0.1:9/ws", flag, *common(tmp_path))
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"error: {flag} only applies to a resumed run: add --resume RUN_ID"
        ]


# ------------------------------------------------------------------ run status, exit codes


class _InfoOnly(BaseHTTPRequestHandler):
    """Answers /info like an adapter but has no WebSocket: every session's connection is
    refused after the pre-run check passed (a proxy in front of a dead adapter)."""

    info: dict = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body, code = (json.dumps(self.info).encode(), 200) if self.path == "/info" else (b"", 404)
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def info_only_endpoint():
    with AdapterProcess("always") as real:
        info = httpx.get(f"http://127.0.0.1:{real.port}/info").json()
    handler = type("Handler", (_InfoOnly,), {"info": info})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"ws://127.0.0.1:{server.server_address[1]}/ws"
    server.shutdown()
    server.server_close()


def test_an_endpoint_that_takes_no_sessions_stops_the_run_with_them_pending(
    info_only_endpoint, adapter_env, benchmark_path, tmp_path
):
    """/healthz and /info answer but no session connects: the endpoint leaves the rotation
    and the run stops `interrupted` (exit 4) instead of burning its queue at `connect`."""
    done = streameval(
        "run", "--adapter-url", info_only_endpoint, "--benchmark", str(benchmark_path),
        "--unreachable-timeout", "1", "--json", *common(tmp_path),
    )  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert "stopped: every adapter endpoint has been unreachable for 1s" in last
    (run_id,) = listed_runs(tmp_path)
    assert listed_runs(tmp_path)[run_id]["status"] == "interrupted"
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        sessions = store.sessions(run_id)
        assert {s.status for s in sessions} == {"pending"}
        assert store.count_events(run_id) == 0


def test_a_run_whose_every_session_fails_exits_3_with_status_failed(
    adapter_env, benchmark_path, tmp_path
):
    # Every session breaks the protocol (an endpoint that cannot be reached at all no longer
    # fails its sessions one by one: it leaves the rotation and the run stops, see
    # tests/test_replica_health.py).
    with AdapterProcess("tests.wire_adapters:GarbageAdapter") as garbage:
        endpoint = garbage.url
        done = streameval(
            "run", "--adapter-url", endpoint, "--benchmark", str(benchmark_path),
            "--json", *common(tmp_path),
        )  # fmt: skip
        assert done.returncode == 3, done.stderr
        summary = json.loads(done.stdout)  # printed before the non-zero exit
        assert (summary["finished"], summary["failed"], summary["failed_total"]) == (0, 3, 3)
        assert summary["status"] == "failed"
        assert listed_runs(tmp_path)[summary["run_id"]]["status"] == "failed"
        with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
            sessions = store.sessions(summary["run_id"])
            assert {(s.failure_stage, s.failure_cause) for s in sessions} == {
                ("protocol", "adapter")
            }
        # Without --json too, and `streameval runs` shows the failed status in red.
        again = streameval(
            "run", "--adapter-url", endpoint, "--benchmark", str(benchmark_path),
            *common(tmp_path),
        )  # fmt: skip
        assert again.returncode == 3
        assert "failed: every session failed" in again.stderr
        colored = streameval(
            "runs",
            "--store",
            f"sqlite:///{tmp_path / 's.db'}",
            env={**os.environ, "FORCE_COLOR": "1"},
        )
        assert "\x1b[31mfailed" in colored.stdout


def test_a_hung_adapter_fails_every_session_and_the_run(adapter_env, benchmark_path, tmp_path):
    with AdapterProcess("tests.wire_adapters:HangingAdapter") as adapter:
        done = streameval(
            "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark_path),
            "--response-timeout", "0.5", "--json", *common(tmp_path),
        )  # fmt: skip
    assert done.returncode == 3, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["status"], summary["failed"]) == ("failed", 3)


def test_a_partly_failed_run_exits_1_and_stays_finished(adapter_env, tmp_path):
    benchmark = broken_video_benchmark(tmp_path / "bench", [QA, QA_EARLY])
    with AdapterProcess("always") as adapter:
        done = streameval(
            "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark),
            "--json", *common(tmp_path),
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["finished"], summary["failed"], summary["status"]) == (2, 1, "finished")
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        bad = next(s for s in store.sessions(summary["run_id"]) if s.session_id == "t:qa:bad")
        assert (bad.status, bad.failure_stage, bad.failure_cause) == ("failed", "frames", "input")
        (event,) = store.iter_events(summary["run_id"], "t:qa:bad")
        assert event.kind == EventKind.SESSION_FAILED
        assert event.payload.cause == "input"


# ------------------------------------------------------------------ --retry-failed


def test_retry_failed_reruns_only_the_infrastructure_failures(adapter_env, monkeypatch, tmp_path):
    # Sessions are claimed longest first, ties in id order: t:pro:1 (17 s), t:qa:1 (12 s),
    # then t:qa:2, t:qa:3 and t:qa:bad (6.4 s each).
    qa3 = QA_EARLY.model_copy(update={"record_id": "t:qa:3"})
    benchmark = broken_video_benchmark(
        tmp_path / "bench", [QA, QA_EARLY, qa3, PROACTIVE], like=QA_EARLY
    )
    url = f"sqlite:///{tmp_path / 's.db'}"
    run = ["--benchmark", str(benchmark), "--concurrency", "1", "--json", *common(tmp_path)]

    # In that order: t:pro:1 (fatal adapter error), t:qa:1 (finished), t:qa:2
    # (the adapter process dies at its question), t:qa:3 (nothing listens any more: the
    # endpoint leaves the rotation and the session stays pending, issue 13 item 1), and with
    # every endpoint gone the run stops `interrupted` before t:qa:bad.
    monkeypatch.setenv(CRASH_AT_ENV, "t:qa:2")
    with AdapterProcess("tests.integrity_adapters:FlakyAdapter") as dying:
        first = streameval("run", "--adapter-url", dying.url, "--unreachable-timeout", "1", *run)
    assert first.returncode == 4, first.stderr
    with Store(url) as store:
        (run_id,) = [r.run_id for r in store.list_runs()]
        assert store.get_run(run_id).status == "interrupted"
        before = {s.session_id: s for s in store.sessions(run_id)}
        events_before = {sid: list(store.iter_events(run_id, sid)) for sid in before}
    assert {sid: (s.status, s.failure_stage, s.failure_cause) for sid, s in before.items()} == {
        "t:pro:1": ("failed", "adapter", "adapter"),
        "t:qa:1": ("finished", None, None),
        "t:qa:2": ("failed", "streaming", "infrastructure"),
        "t:qa:3": ("pending", None, None),
        "t:qa:bad": ("pending", None, None),
    }
    assert events_before["t:qa:3"] == events_before["t:qa:bad"] == []
    for sid, session in before.items():
        failed = [e for e in events_before[sid] if e.kind == EventKind.SESSION_FAILED]
        if session.status == "failed":
            assert [e.payload.cause for e in failed] == [session.failure_cause]
    assert any(e.kind == EventKind.FRAME_ACK for e in events_before["t:qa:2"])

    # A plain resume runs the pending sessions and keeps every failure.
    monkeypatch.delenv(CRASH_AT_ENV)
    with AdapterProcess("tests.integrity_adapters:FlakyAdapter") as healthy:
        plain = streameval("run", "--resume", run_id, "--adapter-url", healthy.url, *run[-5:])
        assert plain.returncode == 1, plain.stderr
        summary = json.loads(plain.stdout)
        assert (summary["kept"], summary["finished"], summary["failed"]) == (3, 1, 1)
        with Store(url) as store:
            middle = {s.session_id: s for s in store.sessions(run_id)}
            events_middle = {sid: list(store.iter_events(run_id, sid)) for sid in middle}
        assert {sid: middle[sid] for sid in ("t:pro:1", "t:qa:1", "t:qa:2")} == {
            sid: before[sid] for sid in ("t:pro:1", "t:qa:1", "t:qa:2")
        }
        bad = middle["t:qa:bad"]
        assert (bad.status, bad.failure_stage, bad.failure_cause) == ("failed", "frames", "input")

        # The same adapter identity on another endpoint needs no --allow-adapter-change.
        retried = streameval(
            "run", "--resume", run_id, "--adapter-url", healthy.url, "--retry-failed", *run[-5:]
        )
    assert retried.returncode == 1, retried.stderr  # the adapter and input failures remain
    summary = json.loads(retried.stdout)
    assert (summary["finished"], summary["failed"], summary["kept"]) == (1, 0, 4)
    assert (summary["retried"], summary["failed_total"], summary["status"]) == (1, 2, "finished")

    with Store(url) as store:
        after = {s.session_id: s for s in store.sessions(run_id)}
        # t:qa:2 redone by --retry-failed; t:qa:3 run by the plain resume, its attempt at the
        # dead endpoint discarded.
        for sid in ("t:qa:2", "t:qa:3"):
            assert (after[sid].status, after[sid].attempt) == ("finished", 1)
            assert (after[sid].failure_stage, after[sid].failure_cause) == (None, None)
            assert after[sid].endpoint == healthy.url
            events = list(store.iter_events(run_id, sid))
            kinds = [e.kind for e in events]
            # The old attempt's events are gone: one clean session from seq 0.
            assert [e.seq for e in events] == list(range(len(events)))
            assert kinds[:2] == [EventKind.ADAPTER_HELLO, EventKind.SESSION_START]
            assert kinds.count(EventKind.SESSION_START) == 1
            assert EventKind.SESSION_FAILED not in kinds
            assert kinds[-1] == EventKind.SESSION_FINISHED
        for sid in ("t:pro:1", "t:qa:1"):
            assert after[sid] == before[sid]
            assert list(store.iter_events(run_id, sid)) == events_before[sid]
        assert after["t:qa:bad"] == middle["t:qa:bad"]
        assert list(store.iter_events(run_id, "t:qa:bad")) == events_middle["t:qa:bad"]
        adapters = store.get_run(run_id).conditions["adapters"]
        assert [(a["adapter"], a["endpoint"]) for a in adapters] == [
            ("flaky", dying.url),
            ("flaky", healthy.url),
        ]
    assert listed_runs(tmp_path)[run_id]["adapters"] == ["flaky 1 (flaky-model)"]


# ------------------------------------------------------------------ failure causes


@pytest.mark.parametrize(
    ("payload", "cause"),
    [
        ({"stage": "connect", "reason": "cannot connect to ws://x/ws: refused"}, "infrastructure"),
        ({"stage": "streaming", "reason": "adapter disconnected"}, "infrastructure"),
        ({"stage": "response", "reason": "no answer within 60s"}, "infrastructure"),
        ({"stage": "handshake", "reason": "adapter sent no hello"}, "infrastructure"),
        ({"stage": "handshake", "reason": "declared conditions: needs state"}, "adapter"),
        ({"stage": "protocol", "reason": "malformed: not JSON"}, "adapter"),
        ({"stage": "adapter", "reason": "adapter error oom: out of memory"}, "adapter"),
        ({"stage": "frames", "reason": "cannot decode v.mp4"}, "input"),
        # A recorded cause wins over the stage.
        ({"stage": "streaming", "reason": "oversized", "cause": "adapter"}, "adapter"),
    ],
)
def test_failure_cause_of_payloads_old_and_new(payload, cause):
    assert failure_cause(payload) == cause


def test_sessions_stored_before_causes_existed_are_classified_by_stage():
    def session(status, stage=None, reason=None, cause=None):
        return SessionInfo(
            "r", "s", ["s"], status, 0, None, stage, reason, None, None, failure_cause=cause
        )

    assert session_failure_cause(session("finished")) is None
    assert session_failure_cause(session("failed", "response", "no answer")) == "infrastructure"
    assert session_failure_cause(session("failed", "frames", "bad video")) == "input"
    assert session_failure_cause(session("failed", "protocol", "x", cause="adapter")) == "adapter"


def test_run_help_documents_the_exit_codes():
    done = streameval("run", "--help")
    text = " ".join(done.stdout.split())
    for line in (
        "0 every session finished",
        "1 some sessions failed",
        "3 every session failed",
        "2 the run could not start",
        "4 the run stopped part-way",
        "130 interrupted",
        "143 terminated by SIGTERM",
    ):
        assert line in text


def test_a_store_from_before_revision_0003_is_upgraded_in_place(store_url):
    """Sessions stored before the new columns keep their data; their cause is derived."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import text

    from streameval.core.store.engine import store_engine
    from streameval.core.store.store import MIGRATIONS_DIR

    engine = store_engine(store_url)
    try:
        with engine.begin() as conn:
            cfg = Config()
            cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0002")
            conn.execute(
                text(
                    "INSERT INTO runs (run_id, created_at, status, benchmark, config, "
                    "config_hash, versions, conditions) VALUES ('old', '2025-01-01 00:00:00+00', "
                    "'finished', 'b', '{}', 'h', '{}', '{}')"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO sessions (run_id, session_id, record_ids, status, attempt, "
                    "failure_stage, failure_reason) VALUES ('old', 's', '[\"s\"]', 'failed', 0, "
                    "'streaming', 'adapter disconnected without a close frame')"
                )
            )
    finally:
        engine.dispose()
    with Store(store_url) as store:
        (session,) = store.sessions("old")
        assert (session.failure_stage, session.adapter, session.failure_cause) == (
            "streaming",
            None,
            None,
        )
        assert session_failure_cause(session) == "infrastructure"
        store.set_session_status("old", "s", "failed", cause="adapter", adapter={"adapter": "x"})
        store.reset_session("old", "s")
        (reset,) = store.sessions("old")
        assert (reset.status, reset.attempt, reset.adapter, reset.failure_cause) == (
            "pending",
            1,
            None,
            None,
        )

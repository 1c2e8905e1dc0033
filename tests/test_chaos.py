"""Chaos (issue 13, "Done when"): a wall-clock run on three replicas of the reference adapter
while, in an order fixed by a seeded random generator, replicas are SIGKILLed and restarted on
the same port, the Core is SIGKILLed twice and resumed each time, and PostgreSQL is restarted
once (`pg_ctl -m fast stop`, then start). At the end:

- the run is finished and every session is finished exactly once (one attempt's events,
  one `session_start`, one `session_finished`) or failed with a recorded stage, reason and
  cause;
- no event is duplicated: each session's events have seq 0..n-1 and no frame is sent twice;
- the timing-independent metrics of the finished sessions equal those of an undisturbed run
  of the same records, options and adapter (the reference adapter answers from pixels alone,
  deterministically);
- a final `--resume --retry-failed` (infrastructure failures are retried as new attempts)
  finishes every session, and then every record's metrics equal the undisturbed run's.

Everything is real: adapter processes (`python -m streameval.adapters reference`), Core
processes (`python -m streameval.cli run`), sockets, a PostgreSQL server restarted for real.
The faults are triggered by the run's progress (sessions ended, read from the store), not by
the clock, so the same faults hit the same phase of the run on a slow or a fast machine.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.store import SessionInfo, Store
from streameval.events import EventKind
from tests.faults import cli, free_port, restart_postgres, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(480)]

SEED = 13  # the chaos driver's seed: which replica dies, when, for how long
RECORDS = 20  # the synthetic benchmark (seed 0): 16 QA records and 4 proactive ones
# Videos played at 2x: QA sessions of 3 to 7 seconds, proactive ones of 15 to 20, so that
# faults strike sessions in flight. The chaos run has one session per replica at a time (a
# replica's death fails at most one); the undisturbed run three (it only has to be quick:
# concurrency changes nothing the adapter sees).
PACING = ("--pacing", "wall_clock", "--speed", "2")
CHAOS_CONCURRENCY = 1
CALM_CONCURRENCY = 3

# The chaos, in order. Each fault strikes once STRIDE more sessions ended after the previous
# fault was over (a replica back, the server up, a resumed Core past its checks and running
# sessions), so each strikes a run that is otherwise whole, at the same phase on a slow or a
# fast machine. (A replica killed while a resumed Core checks its endpoints makes that Core
# refuse to start, exit 2, as documented: the driver does not do that.)
SCHEDULE = ("replica", "core", "postgres", "replica", "core", "replica")
STRIDE = 1
# A resumed Core starts (imports, checks the endpoints' /info) and redoes the sessions a
# SIGKILLed Core had in flight within this many seconds; far less than the 60 s lease.
TAKEOVER_S = 20.0


# --------------------------------------------------------------------------- processes


class Replica(AdapterProcess):
    """The reference adapter on a fixed port, so that a replica killed and started again is
    the same `--adapter-url` the run was given."""

    def __init__(self, port: int) -> None:
        super().__init__("reference")
        self.fixed_port = port

    def command(self) -> list[str]:
        command = super().command()
        command[command.index("--port") + 1] = str(self.fixed_port)
        return command


class Core:
    """One `streameval run` process; its output goes to files (nothing blocks on a pipe)."""

    def __init__(self, name: str, args: list[str], folder: Path) -> None:
        self.name = name
        self.out_path = folder / f"{name}.out"
        self.err_path = folder / f"{name}.err"
        with self.out_path.open("w") as out, self.err_path.open("w") as err:
            self.process = subprocess.Popen(cli(*args), stdout=out, stderr=err, text=True)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def alive(self) -> bool:
        return self.process.poll() is None

    def describe(self) -> str:
        return (
            f"{self.name} (pid {self.process.pid}, exit {self.process.poll()}): "
            f"stdout {self.stdout!r} stderr {self.stderr[-3000:]!r}"
        )


# --------------------------------------------------------------------------- PostgreSQL


# --------------------------------------------------------------------------- checks


def ended(store: Store, run_id: str) -> int:
    return sum(s.status in ("finished", "failed") for s in store.sessions(run_id))


def assert_sessions_sound(store: Store, run_id: str) -> list[SessionInfo]:
    """The run finished; every session finished exactly once or failed with a recorded
    stage, reason and cause; no session's events are duplicated or spliced from two
    attempts."""
    assert store.get_run(run_id).status == "finished"
    sessions = store.sessions(run_id)
    assert len(sessions) == RECORDS
    for session in sessions:
        sid = session.session_id
        events = list(store.iter_events(run_id, sid))
        kinds = [e.kind for e in events]
        assert [e.seq for e in events] == list(range(len(events))), sid  # no gap, no duplicate
        frames = [e.payload.index for e in events if e.kind == EventKind.FRAME_SENT]
        assert len(frames) == len(set(frames)), f"{sid}: a frame was sent twice: {frames}"
        assert kinds.count(EventKind.SESSION_START) == 1, (sid, kinds)
        if session.status == "finished":
            assert kinds.count(EventKind.SESSION_FINISHED) == 1, (sid, kinds)
            assert EventKind.SESSION_FAILED not in kinds, (sid, kinds)
        else:
            assert session.status == "failed", (sid, session.status)
            assert session.failure_stage and session.failure_reason, session
            assert session.failure_cause, session
            assert kinds.count(EventKind.SESSION_FAILED) == 1, (sid, kinds)
            assert EventKind.SESSION_FINISHED not in kinds, (sid, kinds)
    return sessions


def score_records(url: str, run_id: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        cli("score", run_id, "--store", url, "--json", "--records"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {record["record_id"]: record for record in json.loads(done.stdout)["records"]}


def outcome(record: dict[str, Any]) -> dict[str, Any]:
    """A record's timing-independent metrics. Under wall-clock pacing latencies, response
    delays, onset times and dropped-frame counts depend on the machine's load; what the
    reference adapter answered does not (it answers from the frames it was sent). So:
    - QA: the prediction, its parse, correctness, invalidity, and how many responses;
    - proactive: per trigger window its assignment (in window, missed, ...), the prediction
      and its score, plus the answered/unanswered episodes, false alarms, redundant and tail
      responses (the windows are seconds of video wide, the adapter answers at once: a hit
      does not depend on the load).
    """
    if record["qa"] is not None:
        qa = record["qa"]
        return {k: qa[k] for k in ("gold", "prediction", "parsed", "correct", "invalid")} | {
            "responses": qa["responses"]
        }
    proactive = record["proactive"]
    windows = [
        {k: w[k] for k in ("trigger", "answer", "assignment", "prediction", "score")}
        for w in proactive["windows"]
    ]
    counts = ("answered_episodes", "unanswered_episodes", "false_alarms", "redundant")
    return {"windows": windows, "tail_responses": proactive["tail_responses"]} | {
        k: proactive[k] for k in counts
    }


# --------------------------------------------------------------------------- the chaos


class Chaos:
    """Drives the faults of SCHEDULE against one run, logging what it did (for failures)."""

    def __init__(self, url: str, data: str, replicas: list[Replica], folder: Path) -> None:
        self.url, self.data, self.replicas, self.folder = url, data, replicas, folder
        self.rng = random.Random(SEED)
        self.log: list[str] = []
        self.cores: list[Core] = []
        self.started = time.monotonic()
        self.seen: dict[str, tuple] = {}

    def ended(self, store: Store, run_id: str) -> int:
        """Sessions ended so far; every session's change of state goes into the log."""
        sessions = store.sessions(run_id)
        for s in sessions:
            state = (s.status, s.attempt, s.endpoint, s.failure_stage)
            if self.seen.get(s.session_id) != state:
                self.seen[s.session_id] = state
                self.note(f"  {s.session_id} {' '.join(map(str, state))}")
        return sum(s.status in ("finished", "failed") for s in sessions)

    def note(self, what: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:6.1f}s {what}")

    @property
    def core(self) -> Core:
        return self.cores[-1]

    def start_core(self, args: list[str]) -> Core:
        core = Core(f"core-{len(self.cores) + 1}", args, self.folder)
        self.cores.append(core)
        self.note(f"{core.name} started (pid {core.process.pid})")
        return core

    def wait_for_progress(self, store: Store, run_id: str, fault: str) -> None:
        """Until STRIDE more sessions ended; the run must still be going for the fault."""
        sessions_ended = self.ended(store, run_id) + STRIDE
        wait_for(
            lambda: not self.core.alive() or self.ended(store, run_id) >= sessions_ended,
            timeout_s=120.0,
            what=f"{sessions_ended} sessions to end before the {fault} fault",
        )
        assert self.core.alive(), f"the run ended before the {fault} fault: " + "\n".join(
            [*self.log, self.core.describe()]
        )
        self.note(f"{self.ended(store, run_id)} of {RECORDS} sessions ended: {fault} fault")
        time.sleep(self.rng.uniform(0.0, 0.5))  # somewhere in the sessions now in flight

    def kill_replica(self) -> None:
        replica = self.rng.choice(self.replicas)
        down_s = self.rng.uniform(0.5, 2.0)
        replica.kill()
        self.note(f"replica :{replica.fixed_port} SIGKILLed, down for {down_s:.1f}s")
        time.sleep(down_s)
        replica.start()
        self.note(f"replica :{replica.fixed_port} restarted")

    def kill_core(self, store: Store, run_id: str) -> None:
        killed = self.core
        killed.process.send_signal(signal.SIGKILL)
        killed.process.wait()
        self.note(f"{killed.name} SIGKILLed")
        in_flight = {
            s.session_id: s.attempt for s in store.sessions(run_id) if s.status == "running"
        }
        # The dead Core's lease names a process that is gone: the resume takes over at once
        # (docs: "on the same host a dead owner process (SIGKILL) is taken over at once"),
        # with the default lease (60 s), never waiting for it to run out.
        resumed = self.start_core(["run", "--resume", run_id, "--store", self.url, "--json"])

        def redone() -> bool:
            assert resumed.alive() or resumed.process.returncode in (0, 1), resumed.describe()
            now = {s.session_id: s for s in store.sessions(run_id)}
            return all(
                now[sid].attempt > attempt or now[sid].status in ("finished", "failed")
                for sid, attempt in in_flight.items()
            )

        # So the sessions the dead Core had in flight are redone at once as new attempts, not
        # left "running" under its session leases until they expire.
        wait_for(
            redone,
            timeout_s=TAKEOVER_S,
            what=f"{resumed.name} to redo the sessions {sorted(in_flight)} that the SIGKILLed "
            f"{killed.name} had in flight (their leases named a dead process)",
        )
        self.note(f"{resumed.name} redid {sorted(in_flight)}")

    def restart_postgres(self) -> None:
        down_s = self.rng.uniform(0.5, 1.5)
        self.note(f"PostgreSQL stopping, down for {down_s:.1f}s")
        restart_postgres(self.data, self.url, down_s)
        self.note("PostgreSQL started")

    def strike(self, fault: str, store: Store, run_id: str) -> None:
        if fault == "replica":
            self.kill_replica()
        elif fault == "core":
            self.kill_core(store, run_id)
        else:
            self.restart_postgres()


def run_args(url: str, replicas: list[Replica], cache: Path, concurrency: int) -> list[str]:
    urls = [arg for replica in replicas for arg in ("--adapter-url", replica.url)]
    options = ("--concurrency", str(concurrency), *PACING, "--cache-dir", str(cache), "--json")
    return ["run", "--store", url, *urls, *options]


def test_chaos_replicas_core_and_postgresql_killed_lose_and_change_nothing(
    tmp_path: Path, pg_database: tuple[str, str]
) -> None:
    url, data = pg_database
    cache = tmp_path / "cache"
    replicas = [Replica(free_port()) for _ in range(3)]
    chaos = Chaos(url, data, replicas, tmp_path)
    try:
        for replica in replicas:
            replica.start()

        # 1. The undisturbed run: same records, options and replicas, its own store.
        calm_url = f"sqlite:///{tmp_path / 'calm.db'}"
        calm = subprocess.run(
            cli(*run_args(calm_url, replicas, cache, CALM_CONCURRENCY)),
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert calm.returncode == 0, calm.stderr
        calm_id = json.loads(calm.stdout)["run_id"]
        calm_records = score_records(calm_url, calm_id)
        assert len(calm_records) == RECORDS
        assert {r["status"] for r in calm_records.values()} == {"finished"}

        # 2. The same run under chaos.
        Store(url).close()  # the schema, so that the driver can watch read-only from the start
        with Store(url, read_only=True) as store:
            chaos.start_core(run_args(url, replicas, cache, CHAOS_CONCURRENCY))
            wait_for(lambda: bool(store.list_runs()) or not chaos.core.alive(), 120.0, "the run")
            assert store.list_runs(), chaos.core.describe()
            run_id = store.list_runs()[0].run_id
            for fault in SCHEDULE:
                chaos.wait_for_progress(store, run_id, fault)
                chaos.strike(fault, store, run_id)
            last = chaos.core
            last.process.wait(timeout=240)
            chaos.note(f"{last.name} exited {last.process.returncode}")
            log = "\n".join(chaos.log)

            # Two Cores SIGKILLed, the third finished the run; none printed a traceback.
            assert [c.process.returncode for c in chaos.cores[:2]] == [-9, -9], log
            assert last.process.returncode in (0, 1), f"{log}\n{last.describe()}"
            for core in chaos.cores:
                assert "Traceback" not in core.stderr, core.describe()
            summary = json.loads(last.stdout)
            assert summary["run_id"] == run_id
            assert summary["sessions"] == RECORDS
            sessions = assert_sessions_sound(store, run_id)
            failed = [s for s in sessions if s.status == "failed"]
            assert summary["failed_total"] == len(failed), (summary, failed)
            assert last.process.returncode == (1 if failed else 0), last.describe()
            # Only the replicas' deaths may fail a session (mid-stream: TRACE's rule), and
            # at most one session per replica kill (CHAOS_CONCURRENCY).
            assert all(s.failure_cause == "infrastructure" for s in failed), failed
            assert len(failed) <= SCHEDULE.count("replica"), failed

            # 3. The finished sessions' metrics equal the undisturbed run's.
            records = score_records(url, run_id)
            finished = {s.record_ids[0] for s in sessions if s.status == "finished"}
            assert finished == {rid for rid, r in records.items() if r["status"] == "finished"}
            assert {rid: outcome(records[rid]) for rid in finished} == {
                rid: outcome(calm_records[rid]) for rid in finished
            }

            # 4. Infrastructure failures are retried as new attempts: then every record's
            # metrics equal the undisturbed run's.
            retried = subprocess.run(
                cli("run", "--resume", run_id, "--retry-failed", "--store", url, "--json"),
                capture_output=True, text=True, timeout=180,
            )  # fmt: skip
            assert retried.returncode == 0, retried.stderr
            assert json.loads(retried.stdout)["retried"] == len(failed)
            sessions = assert_sessions_sound(store, run_id)
            assert {s.status for s in sessions} == {"finished"}
            records = score_records(url, run_id)
            assert {rid: outcome(r) for rid, r in records.items()} == {
                rid: outcome(r) for rid, r in calm_records.items()
            }
    finally:
        for core in chaos.cores:
            if core.alive():
                core.process.kill()
                core.process.wait()
        for replica in replicas:
            replica.stop()
        print("\n".join(chaos.log))  # shown by pytest when the test fails

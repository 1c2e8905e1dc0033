"""Claim throughput of the store's work queue on PostgreSQL (or SQLite: --sqlite).

    python -m bench.bench_claims --pg-url postgresql+psycopg://postgres@127.0.0.1:5435/postgres
    python -m bench.bench_claims --workers 1 4 16 --sessions 10000 --write
    python -m bench.bench_claims --workers 16 --profile   # cProfile of one claimer
    python -m bench.bench_claims --workers 16 --sqlite    # a SQLite file, printed only

For each claimer count, a fresh database holds one run of --sessions sessions (created with
Store.create_run + add_sessions: no records, no videos). The claimers are separate processes
('spawn'), each with its own Store, SessionQueue and WorkerIdentity; each loops
`SessionQueue.claim(run_id)` and at once ends the session with
`Store.set_session_status(..., "finished", owner=worker_id)` (the release path) until claim
returns None. Wall time runs from the start barrier to the last claimer's end. Afterwards the
store must hold every session finished at attempt 0, and the claimers' lists must name each
session exactly once. The server URL comes from --pg-url or $STREAMEVAL_BENCH_PG_URL or
$STREAMEVAL_TEST_PG_URL (`eval "$(.ci/start-postgres.sh)"`); the bench creates its own
database on that server and drops it afterwards. --write puts the result into the
"Claim throughput" section of BENCHMARKS.md. Target: at least 200 claims/s with 16 claimers.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import multiprocessing as mp
import os
import platform
import pstats
import resource
import socket
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import update_section  # noqa: E402
from streameval.core.store import models  # noqa: E402
from streameval.core.store.queue import SessionQueue, WorkerIdentity  # noqa: E402
from streameval.core.store.store import Store  # noqa: E402

TITLE = "Claim throughput"
TARGET_WORKERS = 16
TARGET_CLAIMS_S = 200.0
RUN_ID = "bench-claims"
LEASE_S = 60.0


@dataclass
class ClaimerResult:
    index: int
    started: float  # time.monotonic(): one clock for every process on the machine
    ended: float
    session_ids: list[str]
    claim_s: list[float]  # each successful claim's latency
    finish_s: list[float]  # each set_session_status(finished) latency
    lost: int  # finishes the store refused (the lease was not held): must stay 0
    cpu_s: float  # this process's CPU time (user + system) while it claimed
    server_cpu_s: float | None  # its PostgreSQL backend's, when that process is readable here
    profile: str | None = None


def _pg_url(url: str, database: str) -> str:
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.set(database=database).render_as_string(hide_password=False)


@contextmanager
def fresh_database(server_url: str, name: str):
    """A new, empty database on the server, dropped on the way out."""
    # pool_pre_ping: a bench may restart the server meanwhile (bench_fleet's faults).
    admin = create_engine(
        _pg_url(server_url, "postgres"), isolation_level="AUTOCOMMIT", pool_pre_ping=True
    )
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield _pg_url(server_url, name)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def server_settings(server_url: str) -> dict[str, str]:
    admin = create_engine(_pg_url(server_url, "postgres"))
    try:
        with admin.connect() as conn:
            names = ("server_version", "fsync", "synchronous_commit", "max_connections")
            return {name: conn.execute(text(f"SHOW {name}")).scalar_one() for name in names}
    finally:
        admin.dispose()


def _backend_cpu_s(pid: int) -> float | None:
    """CPU seconds of a PostgreSQL backend process, when it runs on this machine."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _backend_pid(store: Store) -> int | None:
    """The PostgreSQL backend serving the store's pooled connection (None on SQLite)."""
    if store.engine.dialect.name != "postgresql":
        return None
    with store.transaction("backend pid") as conn:
        return conn.execute(text("SELECT pg_backend_pid()")).scalar_one()


@contextmanager
def fresh_store(server_url: str | None, name: str):
    """A new, empty store: a database on the PostgreSQL server, or (no server) a SQLite
    file in a temporary folder."""
    if server_url is not None:
        with fresh_database(server_url, name) as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix=name) as folder:
        yield f"sqlite:///{Path(folder) / 'store.db'}"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def claimer(index: int, url: str, run_id: str, barrier, results, profile: bool) -> None:
    """One claimer process: claim and finish sessions until the queue is empty."""
    worker = WorkerIdentity(f"bench-{socket.gethostname()}-{os.getpid()}-{index}", "bench")
    with Store(url) as store:
        queue = SessionQueue(store, worker, LEASE_S)
        queue.outstanding(run_id)  # connect (and warm the pool) before the clock starts
        backend = _backend_pid(store)
        server_before = None if backend is None else _backend_cpu_s(backend)
        ids: list[str] = []
        claim_s: list[float] = []
        finish_s: list[float] = []
        lost = 0
        profiler = cProfile.Profile() if profile else None
        barrier.wait()
        started = time.monotonic()
        cpu_before = _cpu_s()
        if profiler is not None:
            profiler.enable()
        while True:
            t0 = time.perf_counter()
            session = queue.claim(run_id)
            t1 = time.perf_counter()
            if session is None:
                break
            held = store.set_session_status(
                run_id, session.session_id, "finished", owner=worker.worker_id
            )
            t2 = time.perf_counter()
            lost += not held
            ids.append(session.session_id)
            claim_s.append(t1 - t0)
            finish_s.append(t2 - t1)
        ended = time.monotonic()
        cpu = _cpu_s() - cpu_before
        server_after = None if backend is None else _backend_cpu_s(backend)
        same = _backend_pid(store) == backend  # the pool kept one connection
        server = None
        if same and server_before is not None and server_after is not None:
            server = server_after - server_before
        report = None
        if profiler is not None:
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
            report = out.getvalue()
    results.put(
        ClaimerResult(index, started, ended, ids, claim_s, finish_s, lost, cpu, server, report)
    )


@dataclass
class Measurement:
    workers: int
    sessions: int
    wall_s: float
    claimed: int
    distinct: int
    claimed_twice: int
    lost: int
    finished_attempt0: int
    claim_ms: tuple[float, float]  # p50, p99
    claim_ms_ends: tuple[float, float]  # p50 over each claimer's first and last tenth
    finish_ms: tuple[float, float]
    per_worker: tuple[int, int]  # fewest, most claims of one claimer
    client_cpu_ms: float  # claimer processes' CPU per claim
    server_cpu_ms: float | None  # their PostgreSQL backends' CPU per claim
    load: tuple[float, float]  # 1-minute load average before and after
    profile: str | None

    @property
    def claims_s(self) -> float:
        return self.claimed / self.wall_s

    @property
    def exact(self) -> bool:
        return (
            self.claimed == self.sessions
            and self.distinct == self.sessions
            and self.claimed_twice == 0
            and self.lost == 0
            and self.finished_attempt0 == self.sessions
        )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] * 1000


def measure(server_url: str | None, workers: int, sessions: int, profile: bool) -> Measurement:
    """`server_url` None: on a SQLite file."""
    name = f"streameval_bench_claims_{os.getpid()}_{workers}"
    with fresh_store(server_url, name) as url:
        with Store(url) as store:  # migrates the new database
            store.create_run(RUN_ID, benchmark="bench", config={"bench": "claims"})
            store.add_sessions(RUN_ID, [(f"s{i:06d}", [f"r{i:06d}"]) for i in range(sessions)])
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(workers)
        results = ctx.Queue()
        procs = [
            ctx.Process(
                target=claimer,
                args=(i, url, RUN_ID, barrier, results, profile and i == 0),
                daemon=True,
            )
            for i in range(workers)
        ]
        load_before = os.getloadavg()[0]
        for proc in procs:
            proc.start()
        outcomes = [results.get() for _ in procs]  # before join: the queue must drain
        for proc in procs:
            proc.join()
            if proc.exitcode != 0:
                raise SystemExit(f"a claimer exited with {proc.exitcode}")
        load_after = os.getloadavg()[0]
        with Store(url) as store, store.transaction("count sessions") as conn:
            table = models.sessions
            finished_attempt0 = conn.execute(
                select(func.count())
                .select_from(table)
                .where(
                    table.c.run_id == RUN_ID,
                    table.c.status == "finished",
                    table.c.attempt == 0,
                    table.c.lease_owner.is_(None),
                )
            ).scalar_one()
    ids = Counter(sid for outcome in outcomes for sid in outcome.session_ids)
    claim_s = [s for outcome in outcomes for s in outcome.claim_s]
    finish_s = [s for outcome in outcomes for s in outcome.finish_s]
    counts = [len(outcome.session_ids) for outcome in outcomes]
    claimed = sum(counts)
    tenth = [max(1, len(o.claim_s) // 10) for o in outcomes]
    first = [s for o, n in zip(outcomes, tenth, strict=True) for s in o.claim_s[:n]]
    last = [s for o, n in zip(outcomes, tenth, strict=True) for s in o.claim_s[-n:]]
    server = [o.server_cpu_s for o in outcomes]
    server_ms = None if None in server else sum(server) / max(claimed, 1) * 1000
    return Measurement(
        workers=workers,
        sessions=sessions,
        wall_s=max(o.ended for o in outcomes) - min(o.started for o in outcomes),
        claimed=claimed,
        distinct=len(ids),
        claimed_twice=sum(1 for n in ids.values() if n > 1),
        lost=sum(o.lost for o in outcomes),
        finished_attempt0=finished_attempt0,
        claim_ms=(_pct(claim_s, 50), _pct(claim_s, 99)),
        claim_ms_ends=(_pct(first, 50), _pct(last, 50)),
        finish_ms=(_pct(finish_s, 50), _pct(finish_s, 99)),
        per_worker=(min(counts), max(counts)),
        client_cpu_ms=sum(o.cpu_s for o in outcomes) / max(claimed, 1) * 1000,
        server_cpu_ms=server_ms,
        load=(load_before, load_after),
        profile=next((o.profile for o in outcomes if o.profile), None),
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _cpu(m: Measurement) -> str:
    server = "?" if m.server_cpu_ms is None else f"{m.server_cpu_ms:.1f}"
    return f"{m.client_cpu_ms:.1f} + {server}"


def report(results: list[Measurement], settings: dict[str, str], command: str) -> str:
    rows = "\n".join(
        f"| {m.workers} | {m.claimed:,} | {m.wall_s:.1f} | {m.claims_s:,.0f} | "
        f"{m.claim_ms[0]:.1f} / {m.claim_ms[1]:.1f} | {m.claim_ms_ends[0]:.1f} -> "
        f"{m.claim_ms_ends[1]:.1f} | {m.finish_ms[0]:.1f} | {_cpu(m)} | "
        f"{m.load[0]:.1f} -> {m.load[1]:.1f} | {'yes' if m.exact else 'NO'} |"
        for m in results
    )
    target = next((m for m in results if m.workers == TARGET_WORKERS), None)
    if target is None:
        verdict = f"not measured ({TARGET_WORKERS} claimers were not run)"
    else:
        meets = target.claims_s >= TARGET_CLAIMS_S and target.exact
        verdict = f"{target.claims_s:,.0f} claims/s: {'meets' if meets else 'MISSES'} it"
        if target.server_cpu_ms is not None:
            cpu_ms = target.client_cpu_ms + target.server_cpu_ms
            verdict += (
                f". With {target.workers} claimers, claimers and backends kept "
                f"{target.claims_s * cpu_ms / 1000:.1f} of the machine's {os.cpu_count()} "
                f"cores busy ({target.claims_s:,.0f} claims/s x {cpu_ms:.1f} ms); the "
                f"backends' {target.server_cpu_ms:.1f} ms per claim alone caps one "
                f"PostgreSQL core at {1000 / target.server_cpu_ms:,.0f} claims/s"
            )
    sessions = results[0].sessions
    return (
        f"Measured {date.today().isoformat()} on {machine()}; PostgreSQL "
        f"{settings['server_version'].split()[0]} on the same machine over loopback TCP "
        f"(fsync={settings['fsync']}, synchronous_commit={settings['synchronous_commit']}); "
        f'rerun: `{command}` (needs a server: `eval "$(.ci/start-postgres.sh)"`).\n\n'
        f"One run of {sessions:,} sessions in a fresh database per row. Each claimer is its "
        f"own process (own Store, SessionQueue and WorkerIdentity) looping "
        f"`SessionQueue.claim(run_id)` and ending each session at once with "
        f"`set_session_status(..., 'finished', owner=...)`; wall time is from the start "
        f"barrier to the last claimer's end. 'First -> last tenth': median claim latency over "
        f"each claimer's first and last tenth of its claims. CPU per claim: the claimer "
        f"processes' + their PostgreSQL backends' (claim and finish together). 'Exactly "
        f"once': {sessions:,} distinct sessions claimed, none twice, no finish refused, and "
        f"the store holds all {sessions:,} finished at attempt 0 with no lease left.\n\n"
        "| claimers | claimed | wall (s) | claims/s | claim ms p50 / p99 | claim ms, first -> "
        "last tenth | finish ms p50 | CPU ms per claim | load avg | exactly once |\n"
        "|---:|---:|---:|---:|---|---|---:|---|---|---|\n"
        f"{rows}\n\n"
        f"Target: at least {TARGET_CLAIMS_S:g} claims/s with {TARGET_WORKERS} claimers: "
        f"{verdict}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pg-url",
        default=os.environ.get("STREAMEVAL_BENCH_PG_URL")
        or os.environ.get("STREAMEVAL_TEST_PG_URL"),
        help="PostgreSQL server (any database on it; default $STREAMEVAL_BENCH_PG_URL, "
        "then $STREAMEVAL_TEST_PG_URL)",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--profile", action="store_true", help="cProfile claimer 0, print it")
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument(
        "--sqlite", action="store_true", help="on a SQLite file instead (printed, not written)"
    )
    args = parser.parse_args()
    if not args.pg_url and not args.sqlite:
        parser.error("no server: pass --pg-url or set STREAMEVAL_TEST_PG_URL")
    if args.sqlite and args.write:
        parser.error("--write records the PostgreSQL measurement; --sqlite only prints")
    results = []
    for workers in args.workers:
        result = measure(None if args.sqlite else args.pg_url, workers, args.sessions, args.profile)
        results.append(result)
        print(
            f"{workers:>3} claimers: {result.claimed} claims in {result.wall_s:.2f} s = "
            f"{result.claims_s:,.0f}/s; claim p50 {result.claim_ms[0]:.1f} ms p99 "
            f"{result.claim_ms[1]:.1f} ms (first/last tenth {result.claim_ms_ends[0]:.1f}/"
            f"{result.claim_ms_ends[1]:.1f}); finish p50 {result.finish_ms[0]:.1f} ms; CPU ms "
            f"per claim {_cpu(result)}; load {result.load[0]:.1f}->{result.load[1]:.1f}; "
            f"exactly once: {result.exact}",
            flush=True,
        )
        if result.profile:
            print(result.profile)
    if args.sqlite:
        return
    command = "python -m bench.bench_claims --write"
    if args.workers != [1, 4, 16] or args.sessions != 10_000:
        workers = " ".join(map(str, args.workers))
        command = f"python -m bench.bench_claims --workers {workers} --sessions {args.sessions}"
        command += " --write"
    body = report(results, server_settings(args.pg_url), command)
    print(f"\n## {TITLE}\n\n{body}")
    if args.write:
        update_section(TITLE, body)
    if not all(m.exact for m in results):
        raise SystemExit("a session was not claimed exactly once")


if __name__ == "__main__":
    main()

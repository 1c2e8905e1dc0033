"""Makespan of one run over a fleet of simulated GPUs, against the ideal lower bound.

    python -m bench.bench_fleet                                  # 32 GPUs, SQLite, no faults
    python -m bench.bench_fleet --pg-url URL --pg-data DIR \\
        --fault kill-worker@0.3 --fault restart-postgres@0.5 --fault kill-worker@0.7
    python -m bench.bench_fleet --label "after" --write          # a row of BENCHMARKS.md

The fleet: --gpus simulated GPUs (bench/fleet_gpus.py: real adapter services speaking the
real protocol, --gpus-per-process endpoints in each process, each with a per-frame prefill
cost, a per-answer decode cost and a concurrency cap), real `streameval worker`s: one per GPU
with `--gpus-per-worker 1` (`--concurrency 1`, as a Slurm array or Kubernetes launches them:
docs/scale.md), or one per --gpus-per-worker GPUs, 4 by default (a worker per 4-GPU machine
driving an `--adapter-url` per GPU, as `worker --adapter NAME --gpus 0,1,2,3` does), all
sharing one store and one frame
cache. The benchmark: --sessions QA records, each over a video of its own whose streamed
length is drawn (seeded) from the streamed lengths of the TRACE sample's records under the
`trace` profile (../shared/data/trace_release), streamed from the start at --fps under
wall-clock pacing at --speed, so a 797 s session takes 797 / speed seconds. The default
1,024 sessions on 32 GPUs are 42 minutes of stream per GPU, about what a 40-hour benchmark
on 64 GPUs gives each (issue 35's user); 512 give 21 minutes.

The workers start first (with --follow) and run a warm-up run of one short session per GPU;
once every worker is idle the measured run is created (`streameval run --detach`).
Reported:

- makespan: the run's first claim to its last session's end (the store's times; the
  workers poll every second, so the others start within a second of the first);
- ideal: max(total service time / GPUs, longest service time), where a session's service
  time is its streamed length / speed plus one answer's decode cost: the same formula in
  every row, from the benchmark alone, never from a measurement;
- efficiency = ideal / makespan;
- GPU busy: per GPU, the share of the makespan in which a session was open on it (from the
  adapters' own log of session starts and ends, killed attempts included);
- claim to GPU: per session, its claim (the store's started_at) to its start at the GPU,
  i.e. what the GPU waited for the worker to prepare the session's frames (plus the
  connection's set-up); a GPU's first session and its later ones are shown apart;
- decoded late: of the sessions after each GPU's first, those whose video's frames
  reached the frame cache after their claim (they waited for a decode), in the details line.

Faults (--fault KIND@FRACTION, FRACTION of the ideal makespan after the start):
`kill-worker` SIGKILLs a worker that holds a session and starts a new worker on its GPU
--respawn-s later (as a Slurm requeue or a Kubernetes restart would); `restart-adapter`
SIGKILLs one GPU process and starts it again on its ports; `restart-postgres` stops the
server (needs --pg-url and --pg-data, .ci/start-postgres.sh) for a second and starts it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_claims import fresh_database, machine  # noqa: E402
from bench.fleet_inputs import draw_lengths, write_fleet_benchmark  # noqa: E402
from bench.report import update_section  # noqa: E402
from streameval.core.store.store import Store, StoreError  # noqa: E402
from streameval.listening import listened_url  # noqa: E402
from tests.faults import cli, restart_postgres  # noqa: E402

TITLE = "Fleet makespan"
OUT = REPO / "bench" / "out" / "fleet"


@dataclass
class FleetSettings:
    gpus: int
    gpus_per_process: int
    sessions: int
    speed: float
    fps: float
    prefill_s: float
    decode_s: float
    cap: int
    lease_s: float
    respawn_s: float
    seed: int
    faults: list[tuple[str, float]]
    keep: Path | None = None
    decode_ahead: int | None = None  # the workers' --decode-ahead (None: their default)
    gpus_per_worker: int = 4


@dataclass
class GpuProcess:
    ports: list[int]
    process: subprocess.Popen[str]


@dataclass
class Fleet:
    """The processes of one bench: GPU processes and one worker per --gpus-per-worker GPU
    URLs (a machine's GPUs)."""

    settings: FleetSettings
    store_url: str
    cache: Path
    log: Path
    gpu_processes: list[GpuProcess] = field(default_factory=list)
    # by the GPU URLs each drives
    workers: dict[tuple[str, ...], subprocess.Popen[str]] = field(default_factory=dict)
    retired: list[subprocess.Popen[str]] = field(default_factory=list)

    def start_gpus(self, ports: list[int]) -> GpuProcess:
        s = self.settings
        command = [
            sys.executable, "-m", "bench.fleet_gpus", "--ports", ",".join(map(str, ports)),
            "--prefill-s", str(s.prefill_s), "--decode-s", str(s.decode_s),
            "--cap", str(s.cap), "--log", str(self.log),
        ]  # fmt: skip
        process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=REPO)
        assert process.stdout is not None
        urls = [listened_url(process.stdout.readline().rstrip("\n")) for _ in ports]
        return GpuProcess([int(url.rsplit(":", 1)[1].split("/")[0]) for url in urls], process)

    def start_worker(self, urls: tuple[str, ...]) -> None:
        command = cli(
            "worker", "--store", self.store_url, "--follow",
            "--lease-timeout", str(self.settings.lease_s), "--cache-dir", str(self.cache),
            "--json",
        )  # fmt: skip
        for url in urls:
            command += ["--adapter-url", url]
        if self.settings.decode_ahead is not None:
            command += ["--decode-ahead", str(self.settings.decode_ahead)]
        # Its stderr is kept (--keep): a worker that stops early says why there.
        with (self.log.parent / "workers.err").open("a") as err:
            self.workers[urls] = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO
            )

    @property
    def urls(self) -> list[str]:
        return [f"ws://127.0.0.1:{p}/ws" for g in self.gpu_processes for p in g.ports]

    def stop(self) -> None:
        for process in [*self.workers.values(), *self.retired]:
            if process.poll() is None:
                process.terminate()
        for gpu in self.gpu_processes:
            gpu.process.terminate()
        for process in [*self.workers.values(), *self.retired, *self.gpu_stack()]:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # one that hangs must not lose the measurement
                process.kill()
                process.wait()

    def gpu_stack(self) -> list[subprocess.Popen[str]]:
        return [gpu.process for gpu in self.gpu_processes]


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(processes: list[subprocess.Popen[str]], timeout_s: float = 300) -> None:
    """Until every process is past its start: none used more than 5% of a core over 1 s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = [_cpu_s(p.pid) for p in processes]
        time.sleep(1.0)
        if all(_cpu_s(p.pid) - b < 0.05 for p, b in zip(processes, before, strict=True)):
            return
    raise SystemExit("the workers did not settle")


def create_run(store_url: str, benchmark: Path, s: FleetSettings) -> str:
    command = cli(
        "run", "--store", store_url, "--benchmark", str(benchmark), "--detach", "--json",
        "--pacing", "wall_clock", "--speed", str(s.speed), "--fps", str(s.fps),
        "--qa-history", "0", "--lease-timeout", str(s.lease_s),
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"cannot create the run: {done.stderr.strip()}")
    return json.loads(done.stdout)["run_id"]


def sessions_now(store_url: str, run_id: str):
    """The run's sessions, or None while the store is unreachable (a restart)."""
    try:
        with Store(store_url) as store:
            return store.sessions(run_id)
    except StoreError:
        return None


def kill_worker(fleet: Fleet, run_id: str) -> str:
    """SIGKILL a worker holding a session; start a new one on its GPU after respawn_s."""
    sessions = sessions_now(fleet.store_url, run_id) or []
    held = {s.endpoint for s in sessions if s.status == "running" and s.endpoint}
    urls = next((u for u in fleet.workers if held & set(u)), next(iter(fleet.workers)))
    victim = fleet.workers.pop(urls)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    fleet.retired.append(victim)
    time.sleep(fleet.settings.respawn_s)
    fleet.start_worker(urls)
    return f"killed the worker of {', '.join(urls)}"


def restart_adapter(fleet: Fleet) -> str:
    old = fleet.gpu_processes[0]
    old.process.send_signal(signal.SIGKILL)
    old.process.wait()
    fleet.gpu_processes[0] = fleet.start_gpus(old.ports)
    return f"restarted the GPU process of ports {old.ports}"


def run_faults(fleet: Fleet, run_id: str, ideal_s: float, pg: tuple[str, str] | None, notes):
    started = time.monotonic()
    for kind, fraction in sorted(fleet.settings.faults, key=lambda f: f[1]):
        time.sleep(max(0.0, started + fraction * ideal_s - time.monotonic()))
        at = time.monotonic() - started
        if kind == "kill-worker":
            notes.append(f"{at:.1f} s: {kill_worker(fleet, run_id)}")
        elif kind == "restart-adapter":
            notes.append(f"{at:.1f} s: {restart_adapter(fleet)}")
        elif kind == "restart-postgres":
            assert pg is not None, "restart-postgres needs --pg-url and --pg-data"
            restart_postgres(pg[1], pg[0])
            notes.append(f"{at:.1f} s: restarted PostgreSQL")


def wait_done(store_url: str, run_id: str, timeout_s: float) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sessions = sessions_now(store_url, run_id)
        if sessions and all(s.status in ("finished", "failed") for s in sessions):
            return sessions
        time.sleep(0.5)
    raise SystemExit("the run did not end in time")


@dataclass
class Outcome:
    settings: FleetSettings
    store: str
    makespan_s: float
    ideal_s: float
    total_service_s: float
    longest_s: float
    finished: int
    failed: int
    attempts: int
    busy: list[float]  # per GPU, sorted
    first_waits: list[float]  # claim to GPU of each GPU's first session
    later_waits: list[float]
    tail_s: float  # last session end - the moment the first GPU went idle for good
    load: tuple[float, float]
    notes: list[str]
    # Sessions after their GPU's first whose frames were published after their claim:
    # (how many, of how many, the longest such wait in seconds).
    decoded_late: tuple[int, int, float] = (0, 0, 0.0)

    @property
    def efficiency(self) -> float:
        return self.ideal_s / self.makespan_s


def _union_s(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def gpu_spans(log: Path, t0: float, t1: float) -> dict[int, list[tuple[float, float]]]:
    """Per port, the spans in which a session was open (clipped to [t0, t1])."""
    open_at: dict[tuple[int, str], float] = {}
    spans: dict[int, list[tuple[float, float]]] = {}
    for line in log.read_text().splitlines():
        row = json.loads(line)
        key = (row["port"], row["session"])
        if row["what"] == "start":
            open_at[key] = row["t"]
        elif key in open_at:
            spans.setdefault(row["port"], []).append((max(t0, open_at.pop(key)), min(t1, row["t"])))
    for (port, _), start in open_at.items():  # ended by a kill: open until its process died
        spans.setdefault(port, []).append((max(t0, start), t1))
    return spans


def decode_waits(log: Path, sessions) -> tuple[list[float], list[float]]:
    """(each GPU's first session's wait, every later session's wait), in seconds."""
    reached = {}
    for line in log.read_text().splitlines():
        row = json.loads(line)
        if row["what"] == "start":
            reached[row["session"]] = row["t"]  # the last attempt's start wins
    by_worker: dict[tuple, list] = {}  # by slot: a worker's GPU
    for s in sessions:
        if s.status == "finished" and s.session_id in reached:
            by_worker.setdefault((s.worker_id, s.endpoint), []).append(s)
    first, later = [], []
    for runs in by_worker.values():
        runs.sort(key=lambda s: s.started_at)
        waits = [max(0.0, reached[s.session_id] - s.started_at.timestamp()) for s in runs]
        first.append(waits[0])
        later.extend(waits[1:])
    return first, later


def decoded_late(cache: Path, benchmark: Path, sessions) -> tuple[int, int, float]:
    """Of the sessions after each GPU's first, those that waited for a decode: their
    video's frame-cache entry (its index.json, written last) appeared after their claim."""
    videos = {
        record["record_id"]: benchmark.parent / record["video_path"]
        for record in json.loads(benchmark.read_text())["records"]
    }
    by_worker: dict[tuple, list] = {}  # by slot: a worker's GPU
    for s in sessions:
        if s.status == "finished":
            by_worker.setdefault((s.worker_id, s.endpoint), []).append(s)
    waits = []
    for runs in by_worker.values():
        for s in sorted(runs, key=lambda s: s.started_at)[1:]:
            digest = hashlib.sha256(videos[s.session_id].read_bytes()).hexdigest()
            (index,) = (cache / "frames" / digest[:2]).glob(f"{digest}-*/index.json")
            waits.append(index.stat().st_mtime - s.started_at.timestamp())
    late = [w for w in waits if w > 0]
    return len(late), len(waits), max(late, default=0.0)


def service_times(lengths: list[float], s: FleetSettings) -> list[float]:
    """Each session's service time on one GPU: streamed length / speed + one answer."""
    return [length / s.speed + s.decode_s for length in lengths]


def ideal_bound(service: list[float], gpus: int) -> float:
    return max(sum(service) / gpus, max(service))


def run_fleet(args: argparse.Namespace, s: FleetSettings) -> Outcome:
    lengths = draw_lengths(s.sessions, s.seed)
    service = service_times(lengths, s)
    ideal = ideal_bound(service, s.gpus)
    benchmark = write_fleet_benchmark(
        OUT / f"seed{s.seed}", lengths, args.video_fps, args.width, args.height
    )
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        work = Path(tmp)
        pg = (args.pg_url, args.pg_data) if args.pg_url else None
        if args.pg_url:
            with fresh_database(args.pg_url, f"streameval_bench_fleet_{os.getpid()}") as url:
                return _measure(url, work, benchmark, s, ideal, service, pg)
        return _measure(f"sqlite:///{work / 'store.db'}", work, benchmark, s, ideal, service, None)


def _measure(url, work, benchmark, s, ideal, service, pg) -> Outcome:
    fleet = Fleet(s, url, work / "cache", work / "gpus.jsonl")
    notes: list[str] = []
    with Store(url):
        pass  # migrated before any worker starts
    try:
        for first in range(0, s.gpus, s.gpus_per_process):
            count = min(s.gpus_per_process, s.gpus - first)
            fleet.gpu_processes.append(fleet.start_gpus([0] * count))
        urls = fleet.urls
        for first in range(0, len(urls), s.gpus_per_worker):
            fleet.start_worker(tuple(urls[first : first + s.gpus_per_worker]))
        warm_up(fleet, s)
        load_before = os.getloadavg()[0]
        run_id = create_run(url, benchmark, s)
        faults = threading.Thread(target=run_faults, args=(fleet, run_id, ideal, pg, notes))
        faults.start()
        sessions = wait_done(url, run_id, timeout_s=max(600.0, 20 * ideal))
        faults.join()
        load_after = os.getloadavg()[0]
        with Store(url) as store:
            created = store.get_run(run_id).created_at.timestamp()
    finally:
        fleet.stop()
    if s.keep is not None:  # for `streameval plan --from-run` and a look at the sessions
        s.keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(fleet.log, s.keep / "gpus.jsonl")
        shutil.copy(fleet.log.parent / "workers.err", s.keep / "workers.err")
        if url.startswith("sqlite"):
            shutil.copy(work / "store.db", s.keep / "store.db")
        notes.append(f"run {run_id}, kept in {s.keep}")
    t0 = min(session.started_at.timestamp() for session in sessions)
    notes.append(f"run created {t0 - created:.1f} s before its first claim (the clock's start)")
    outcome = summarise(fleet, sessions, t0, ideal, service, (load_before, load_after), notes)
    outcome.decoded_late = decoded_late(fleet.cache, benchmark, sessions)
    return outcome


def warm_up(fleet: Fleet, s: FleetSettings) -> None:
    """One short session per GPU first, so every worker has started (its imports done, as
    a cluster's workers are long before their model is loaded), then wait until all idle:
    32 processes starting at once on 2 cores are not what a cluster's start looks like."""
    warm = write_fleet_benchmark(OUT / "warm-up", [2.0] * s.gpus, 1, 64, 48)
    run_id = create_run(fleet.store_url, warm, s)
    wait_done(fleet.store_url, run_id, timeout_s=600)
    wait_idle(list(fleet.workers.values()))


def summarise(fleet, sessions, t0, ideal, service, load, notes) -> Outcome:
    end = max(s.finished_at.timestamp() for s in sessions)
    spans = gpu_spans(fleet.log, t0, end)
    makespan = end - t0
    busy = sorted(
        _union_s([(a, b) for a, b in spans.get(p, []) if b > a]) / makespan
        for g in fleet.gpu_processes
        for p in g.ports
    )
    # A GPU that ran nothing of this run (its spans clipped empty) is not where a tail starts.
    ends = [max(b for _, b in port) for port in spans.values() if max(b for _, b in port) > t0]
    idle_from = min(ends, default=end)
    first, later = decode_waits(fleet.log, sessions)
    return Outcome(
        settings=fleet.settings,
        store="PostgreSQL" if fleet.store_url.startswith("postgresql") else "SQLite",
        makespan_s=makespan,
        ideal_s=ideal,
        total_service_s=sum(service),
        longest_s=max(service),
        finished=sum(s.status == "finished" for s in sessions),
        failed=sum(s.status == "failed" for s in sessions),
        attempts=sum(s.attempt for s in sessions),
        busy=busy,
        first_waits=first,
        later_waits=later,
        tail_s=end - idle_from,
        load=load,
        notes=notes,
    )


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else 0.0


def row(label: str, o: Outcome) -> str:
    faults = ", ".join(f"{k}@{f:g}" for k, f in o.settings.faults) or "none"
    return (
        f"| {label} | {o.store} | {faults} | {o.finished}/{o.finished + o.failed} | "
        f"{o.attempts} | {o.ideal_s:.1f} | {o.makespan_s:.1f} | **{o.efficiency:.3f}** | "
        f"{o.tail_s:.1f} | {min(o.busy):.2f} / {_pct(o.busy, 50):.2f} / {max(o.busy):.2f} | "
        f"{_pct(o.first_waits, 50):.2f} / {max(o.first_waits, default=0):.2f} | "
        f"{_pct(o.later_waits, 50):.3f} / {_pct(o.later_waits, 99):.3f} / "
        f"{max(o.later_waits, default=0):.3f} | {o.load[0]:.1f} -> {o.load[1]:.1f} |"
    )


HEADER_ROW = (
    "| code | store | faults | finished | extra attempts | ideal (s) | makespan (s) | "
    "efficiency | tail (s) | GPU busy min / median / max | claim to GPU, 1st session "
    "(s) p50 / max | claim to GPU, later sessions (s) p50 / p99 / max | load avg |\n"
    "|---|---|---|---|---:|---:|---:|---:|---:|---|---|---|---|"
)


def details(o: Outcome) -> str:
    s = o.settings
    busy = " ".join(f"{b:.2f}" for b in o.busy)
    return (
        f"{s.gpus} GPUs ({s.gpus_per_worker} per worker), {s.sessions} sessions, speed "
        f"{s.speed:g}, {s.fps:g} fps, prefill "
        f"{s.prefill_s:g} s/frame, decode {s.decode_s:g} s/answer, cap {s.cap}, lease "
        f"{s.lease_s:g} s: total service {o.total_service_s:.0f} s, longest {o.longest_s:.1f} "
        f"s; per-GPU busy: {busy}; sessions after their GPU's first that waited for a "
        f"decode (frames published after their claim): {o.decoded_late[0]} of "
        f"{o.decoded_late[1]} (longest {o.decoded_late[2]:.2f} s)"
        + ("; " + "; ".join(o.notes) if o.notes else "")
    )


def parse_fault(text: str) -> tuple[str, float]:
    kind, _, at = text.partition("@")
    if kind not in ("kill-worker", "restart-adapter", "restart-postgres") or not at:
        raise argparse.ArgumentTypeError(f"not a fault: {text!r} (KIND@FRACTION)")
    return kind, float(at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=32)
    parser.add_argument("--gpus-per-process", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=1024)
    parser.add_argument("--speed", type=float, default=16.0)
    parser.add_argument("--fps", type=float, default=0.25)
    parser.add_argument("--prefill-s", type=float, default=0.05)
    parser.add_argument("--decode-s", type=float, default=0.5)
    parser.add_argument("--cap", type=int, default=1)
    parser.add_argument("--lease-s", type=float, default=4.0)
    parser.add_argument("--respawn-s", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode-ahead", type=int, help="the workers' --decode-ahead")
    parser.add_argument(
        "--gpus-per-worker", type=int, default=4, help="GPUs each worker drives (a machine's)"
    )
    parser.add_argument("--video-fps", type=int, default=1)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--fault", type=parse_fault, action="append", default=[])
    parser.add_argument("--pg-url", help="PostgreSQL server (default: a SQLite store)")
    parser.add_argument("--pg-data", help="its data folder, for restart-postgres")
    parser.add_argument("--keep", type=Path, help="copy the SQLite store and GPU log here")
    parser.add_argument("--label", default="this checkout")
    parser.add_argument("--write", action="store_true", help="add the row to BENCHMARKS.md")
    args = parser.parse_args()
    settings = FleetSettings(
        args.gpus, args.gpus_per_process, args.sessions, args.speed, args.fps, args.prefill_s,
        args.decode_s, args.cap, args.lease_s, args.respawn_s, args.seed, args.fault, args.keep,
        args.decode_ahead, args.gpus_per_worker,
    )  # fmt: skip
    outcome = run_fleet(args, settings)
    line = row(args.label, outcome)
    print(HEADER_ROW + "\n" + line + "\n\n" + details(outcome))
    if args.write:
        write_row(line, details(outcome))


def write_row(line: str, detail: str) -> None:
    """Add (or replace) the row of this code, store and faults, and its details."""
    from bench.report import BENCHMARKS

    text = BENCHMARKS.read_text()
    marker = f"## {TITLE}\n"
    body = text.split(marker, 1)[1].split("\n## ", 1)[0] if marker in text else ""
    head, _, by_hand = body.partition("\n### ")  # a subsection written by hand stays as is
    rows = [r for r in head.splitlines() if r.startswith("| ") and not r.startswith("| code")]
    notes = [n for n in head.splitlines() if n.startswith("- ")]
    key = "|".join(line.split("|")[:4])  # code, store, faults: one row each
    rows = [r for r in rows if not r.startswith(key + "|")] + [line]
    name = f"- {' / '.join(cell.strip() for cell in key.split('|')[1:4])}:"
    notes = [n for n in notes if not n.startswith(name)] + [f"{name} {detail}"]
    intro = (
        f"Measured {date.today().isoformat()} on {machine()}; rerun: `python -m "
        "bench.bench_fleet` (see its docstring for the options and faults). Ideal = "
        "max(total service time / GPUs, longest service time), a session's service time "
        "being its streamed length / speed + one answer's decode cost: the same formula "
        "for every row. Decode wait: claim to the session's start at its GPU.\n\n"
    )
    tables = intro + HEADER_ROW + "\n" + "\n".join(rows) + "\n\n" + "\n".join(notes)
    update_section(TITLE, tables + (f"\n\n### {by_hand}" if by_hand else ""))


if __name__ == "__main__":
    main()

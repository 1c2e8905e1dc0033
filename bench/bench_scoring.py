"""Scoring speed and memory: one million recorded events, scored from a SQLite store and from JSONL.

    python -m bench.bench_scoring              # build (once), measure, update BENCHMARKS.md
    python -m bench.bench_scoring --events 200000 --large 0 --no-record
    python -m bench.bench_scoring --section-to /tmp/scoring.md   # the section, not BENCHMARKS.md

The event log is what the Core records for the reference adapter under logical pacing:
proactive sessions (frame, workload, ack, step, then a silence or a streamed response per
step) and QA sessions (frames, question, streamed answer). It is written once into
bench/out/ and reused, with its JSONL export.

Each round measures, one after the other so that the machine's load is shared alike: a plain
`json.loads` pass over the export (the yardstick: the least any JSONL reader must do),
`streameval score --help` (what starting the command costs), `streameval score --events
FILE` and `streameval score RUN_ID` (the SQLite store). Each runs
in a fresh process, which reports its own CPU time and its peak RSS (VmHWM in
/proc/self/status: `ru_maxrss` would carry the parent's peak across fork and exec). The two
scoring commands' CPU time counts the whole process, interpreter start and imports included;
the yardstick's counts only its loop, so the ratio errs against the scorer.

Then it measures a run of five million events the same way, once (`--large`, `--large-repeat`):
how the peak RSS grows with the run.

Targets (issue 14): `score --events` within 1.5x the yardstick's CPU and 250 MiB, with the
same numbers as the store gives; the store under 30 s for 1M events. Issue 35: at most 250 MiB
at 5M events too.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import update_section
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.core.store.export import export_jsonl
from streameval.core.store.store import Store
from streameval.scorer.eventlog import SessionLog, store_logs

OUT = Path(__file__).resolve().parent / "out"
RUN_ID = "bench-scoring"
STORE_TARGET_S = 30.0
CPU_RATIO_TARGET = 1.5
RSS_TARGET_MIB = 250.0
# Peak RSS MiB of `score --events` and `score RUN_ID` before scoring dropped each record's
# trace once evaluated (issue 35), measured once at commit ad39a48 on this bench's runs.
KEPT_TRACES_MIB = {1_000_688: (192, 194), 5_000_831: (579, 579)}
PROACTIVE_STEPS = 300  # steps per proactive session (5 min of video at 1 fps)
QA_FRAMES = 20
TASK_TYPES = ("REC", "SSR", "CRR", "stream bench proactive")
SECTION = "Scoring"
BUILD_SESSIONS = 200  # sessions whose logs are held at once while building

# The measured process: `json PATH` (the yardstick) or `cli ARGS...` (a `streameval` command). It
# writes {cpu_s, peak_kib, exit} as JSON to the file named first. Kept to the standard
# library so that the yardstick's process carries nothing the scorer's does not.
_CHILD = r"""
import json, resource, sys, time

def peak_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

report, mode, *args = sys.argv[1:]
code = 0
if mode == "json":
    started = time.process_time()
    with open(args[0], encoding="utf-8") as lines:
        for line in lines:
            json.loads(line)
    cpu = time.process_time() - started
else:
    from streameval.cli import app
    try:
        app(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
with open(report, "w") as out:
    json.dump({"cpu_s": cpu, "peak_kib": peak_kib(), "exit": code}, out)
"""


def _proactive(index: int, rng: random.Random) -> tuple[ProactiveRecord, SessionLog]:
    task_type = TASK_TYPES[index % len(TASK_TYPES)]
    points = sorted(rng.sample(range(20, PROACTIVE_STEPS - 10), 3))
    record = ProactiveRecord(
        record_id=f"p{index:06d}",
        source_id=f"v{index // 3:06d}",
        source_benchmark="ovo-bench" if index % 2 else "streamingbench",
        task_type=task_type,
        video_path=f"videos/v{index // 3:06d}.mp4",
        instruction="Tell me each time the count changes.",
        instruction_time_s=0.0,
        triggers=tuple(
            Trigger(trigger_type="event_onset", answer=str(n + 1), point_s=float(p))
            for n, p in enumerate(points)
        ),
    )
    log = SessionLog(RUN_ID, record.record_id).start()
    answers = {p + rng.randint(0, 6): str(n + 1) for n, p in enumerate(points)}
    for step in range(PROACTIVE_STEPS):
        log.frame(float(step), ack=True)
        log.workload([log.frame_id(step)])
        if step == 0:
            log.instruction(record)
        log.step()
        if step in answers or rng.random() < 0.02:
            text = answers.get(step, "something happened")
            words = text.split()
            log.respond(
                text, deltas=[w + " " for w in words[:-1]] + words[-1:], output_tokens=len(words)
            )
        else:
            log.silent()
    log.finish()
    return record, log


def _qa(index: int, rng: random.Random) -> tuple[QARecord, SessionLog]:
    answer = "ABCD"[index % 4]
    record = QARecord(
        record_id=f"q{index:06d}",
        source_id=f"w{index // 2:06d}",
        source_benchmark="ovo-bench" if index % 2 else "streamingbench",
        task_type=("EPM", "ASI", "OCR", "ACR")[index % 4],
        video_path=f"videos/w{index // 2:06d}.mp4",
        question="Which one?",
        options=("A. one", "B. two", "C. three", "D. four"),
        answer=answer,
        question_time_s=float(QA_FRAMES),
        evidence_anchor_s=float(QA_FRAMES - 5),
    )
    log = SessionLog(RUN_ID, record.record_id).start()
    for step in range(QA_FRAMES + 1):
        log.frame(float(step), ack=True)
        log.workload([log.frame_id(step)])
    log.question(record)
    guess = answer if rng.random() < 0.6 else "ABCD"[(index + 1) % 4]
    log.respond(f"The answer is {guess}", deltas=["The answer", f" is {guess}"], output_tokens=4)
    log.finish()
    return record, log


def build(path: Path, events: int, seed: int = 0) -> int:
    """Write a run of about `events` events into a fresh SQLite store, a part at a time so
    that building five million events holds a few thousand sessions' logs at most; returns
    the count."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    rng = random.Random(seed)
    total, index = 0, 0
    with Store(f"sqlite:///{path}") as store:
        store.create_run(RUN_ID, "handwritten", {"profile": "trace", "pacing": "logical"})
        while total < events:
            records, logs = [], []
            while total < events and len(logs) < BUILD_SESSIONS:
                record, log = _qa(index, rng) if index % 5 == 4 else _proactive(index, rng)
                records.append(record)
                logs.append(log)
                total += len(log.events)
                index += 1
            store_logs(store, RUN_ID, records, logs)
        store.set_run_status(RUN_ID, "finished")
    return total


@dataclass(frozen=True)
class Measure:
    cpu_s: float
    peak_mib: float
    wall_s: float
    output: str  # what the command printed (the scores' JSON); "" for the yardstick


def measure(*args: str) -> Measure:
    """Run one measured process (`_CHILD` with these arguments) and read its report."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(report), *args],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - started
        result = json.loads(report.read_text()) if report.exists() else {"exit": done.returncode}
    if done.returncode or result["exit"]:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return Measure(result["cpu_s"], result["peak_kib"] / 1024, wall, done.stdout)


@dataclass
class Rounds:
    yardstick: list[Measure] = field(default_factory=list)
    startup: list[Measure] = field(default_factory=list)
    exported: list[Measure] = field(default_factory=list)
    stored: list[Measure] = field(default_factory=list)

    def ratios(self, measures: list[Measure]) -> list[float]:
        """CPU over the yardstick's, per round (the machine's load alike for both)."""
        return [m.cpu_s / y.cpu_s for m, y in zip(measures, self.yardstick, strict=True)]

    def identical(self) -> bool:
        outputs = [json.loads(m.output) for m in self.exported + self.stored]
        return all(output == outputs[0] for output in outputs)


def run_rounds(jsonl: Path, url: str, repeat: int) -> Rounds:
    rounds = Rounds()
    scores = ("--json", "--records")
    for number in range(1, repeat + 1):
        rounds.yardstick.append(measure("json", str(jsonl)))
        rounds.startup.append(measure("cli", "score", "--help"))
        rounds.exported.append(measure("cli", "score", "--events", str(jsonl), *scores))
        rounds.stored.append(measure("cli", "score", RUN_ID, "--store", url, *scores))
        y, e, s = rounds.yardstick[-1], rounds.exported[-1], rounds.stored[-1]
        print(
            f"round {number}: json.loads {y.cpu_s:.2f} s; startup {rounds.startup[-1].cpu_s:.2f} "
            f"s; score --events {e.cpu_s:.2f} s CPU ({e.cpu_s / y.cpu_s:.2f}x), "
            f"{e.peak_mib:.0f} MiB; store {s.cpu_s:.2f} s CPU, {s.wall_s:.2f} s wall, "
            f"{s.peak_mib:.0f} MiB",
            flush=True,
        )
    return rounds


def prepare(events: int) -> tuple[Path, str, int, int]:
    """(the export, the store's URL, events, records), building what is not there yet."""
    OUT.mkdir(exist_ok=True)
    path = OUT / f"scoring-{events}.db"
    jsonl = OUT / f"scoring-{events}.jsonl"
    url = f"sqlite:///{path}"
    if not path.exists():
        started = time.perf_counter()
        built = build(path, events)
        jsonl.unlink(missing_ok=True)
        print(f"wrote {built} events in {time.perf_counter() - started:.1f} s")
    # Opened read-write: a store an older streameval built is migrated before it is scored.
    with Store(url) as store:
        total = store.count_events(RUN_ID)
        records = len(store.records(RUN_ID))
        if not _whole_export(jsonl):
            with jsonl.open("w") as handle:
                export_jsonl(store, RUN_ID, handle)
    return jsonl, url, total, records


def _whole_export(path: Path) -> bool:
    """Whether an export is there, with its end line (an older streameval's has none, and
    scoring refuses it)."""
    if not path.exists():
        return False
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 200))
        return b'{"type":"end"' in handle.read()


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if "model name" in line)
    except (OSError, StopIteration):
        pass
    return (
        f"{model}, {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}"
    )


def section(total: int, records: int, rounds: Rounds, loads: tuple[str, str], rerun: str) -> str:
    median = statistics.median
    ratios = rounds.ratios(rounds.exported)
    ratio = median(ratios)
    peak = max(m.peak_mib for m in rounds.exported)
    store_wall = median(m.wall_s for m in rounds.stored)

    def verdict(ok: bool) -> str:
        return "meets it" if ok else "MISSES it"

    def row(name: str, measures: list[Measure]) -> str:
        return (
            f"| {name} | {median(m.cpu_s for m in measures):.2f} | "
            f"{median(rounds.ratios(measures)):.2f} | {max(m.peak_mib for m in measures):.0f} |\n"
        )

    return (
        f"`{rerun}` ({datetime.date.today()}; {_machine()}; load average {loads[0]} before, "
        f"{loads[1]} after). A synthetic run of {total:,} events ({records:,} records: "
        f"proactive sessions of {PROACTIVE_STEPS} steps and QA sessions, as the Core records "
        "the reference adapter under logical pacing), profile trace-paper-v1, exact judge, "
        "1,000 bootstrap resamples per slice, per-record results included (`--json "
        f"--records`). {len(ratios)} rounds, the four processes one after the other in each, "
        "so that they share the machine's load alike; medians over the rounds. Each process "
        "is a fresh one and reports its own CPU time and peak RSS (VmHWM). A `streameval` "
        "command's CPU time is the whole process's, interpreter start and imports included "
        "(the `--help` row shows how much that is); the `json.loads` pass's is its loop's "
        "only.\n\n"
        "| process | CPU s | × `json.loads` pass, same round | peak RSS MiB |\n"
        "|---|---|---|---|\n"
        + row("plain `json.loads` pass over the export (the yardstick)", rounds.yardstick)
        + row("`streameval score --help` (start and imports only)", rounds.startup)
        + row("`streameval score --events FILE`", rounds.exported)
        + row(f"`streameval score {RUN_ID}` (SQLite store)", rounds.stored)
        + f"\n`score --events` against the `json.loads` pass, per round: "
        f"{', '.join(f'{r:.2f}x' for r in ratios)} (median {ratio:.2f}x); target at most "
        f"{CPU_RATIO_TARGET:g}x: {verdict(ratio <= CPU_RATIO_TARGET)}. Its peak RSS, at most "
        f"{peak:.0f} MiB; target at most {RSS_TARGET_MIB:g} MiB: "
        f"{verdict(peak <= RSS_TARGET_MIB)}. The store scores in {store_wall:.2f} s wall; "
        f"target under {STORE_TARGET_S:g} s for 1,000,000 events: "
        f"{verdict(store_wall < STORE_TARGET_S)}. Both sources give identical results, "
        f"per-record ones included: {'yes' if rounds.identical() else 'NO'}.\n"
    )


@dataclass(frozen=True)
class Size:
    """One run size's measurements."""

    total: int
    records: int
    rounds: Rounds
    loads: tuple[str, str]


def _peak(measures: list[Measure]) -> float:
    return max(m.peak_mib for m in measures)


def growth(sizes: list[Size]) -> str:
    """How the scorer's peak RSS grows with the run: each size's peak, next to the peak of
    the scorer that kept every session's trace until the end (KEPT_TRACES_MIB)."""
    rows = ""
    for size in sizes:
        kept = KEPT_TRACES_MIB.get(size.total)
        before = "-" if kept is None else f"{kept[0]} / {kept[1]}"
        rows += (
            f"| {size.total:,} | {size.records:,} | {len(size.rounds.exported)} | "
            f"{_peak(size.rounds.exported):.0f} | {_peak(size.rounds.stored):.0f} | {before} | "
            f"{size.loads[0]} -> {size.loads[1]} |\n"
        )
    peak = max(_peak(size.rounds.exported) for size in sizes)
    small, large = sizes[0], sizes[-1]
    grown = _peak(large.rounds.exported) - _peak(small.rounds.exported)
    slope = grown * 2**20 / (large.total - small.total) if large.total > small.total else 0.0
    return (
        "\nMemory as the run grows (issue 35): each record is evaluated as soon as its "
        "session's events end and its trace dropped, so the peak stays flat in the number of "
        "events. Peak RSS (VmHWM) of each process, the largest over the rounds; 'kept every "
        "trace' is the scorer before that change (commit ad39a48, every session's trace kept "
        "to the end), measured once on the same runs and machine (issue 35 had measured it "
        "at 201 and 586 MiB).\n\n"
        "| events | records | rounds | `score --events` peak RSS MiB | `score RUN_ID` (store) "
        "peak RSS MiB | kept every trace: `--events` / store MiB | load average before -> "
        "after |\n|---|---|---|---|---|---|---|\n"
        + rows
        + f"\n`score --events` peaks at most {peak:.0f} MiB at every size (target at most "
        f"{RSS_TARGET_MIB:g} MiB at 5,000,000 events: "
        f"{'meets it' if peak <= RSS_TARGET_MIB else 'MISSES it'}); from the smallest run to "
        f"the largest it grew {slope:.1f} bytes per event (about 100 when every trace was "
        "kept). Both sources give identical results at every size: "
        f"{'yes' if all(size.rounds.identical() for size in sizes) else 'NO'}.\n"
    )


def _loadavg() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def measured(events: int, repeat: int) -> Size:
    jsonl, url, total, records = prepare(events)
    print(f"{total} events, {records} records", flush=True)
    before = _loadavg()
    rounds = run_rounds(jsonl, url, repeat)
    return Size(total, records, rounds, (before, _loadavg()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--large",
        type=int,
        default=5_000_000,
        help="also measure a run of this many events, for the memory growth (0: none)",
    )
    parser.add_argument("--large-repeat", type=int, default=1)
    parser.add_argument("--no-record", action="store_true", help="do not update BENCHMARKS.md")
    parser.add_argument(
        "--section-to", type=Path, help="write the Scoring section to this file instead"
    )
    args = parser.parse_args()
    main_size = measured(args.events, args.repeat)
    sizes = [main_size]
    if args.large:
        sizes.append(measured(args.large, args.large_repeat))
    rerun = "python -m bench.bench_scoring" + (
        f" --events {args.events}" if args.events != 1_000_000 else ""
    )
    if args.large != 5_000_000:
        rerun += f" --large {args.large}"
    body = section(
        main_size.total, main_size.records, main_size.rounds, main_size.loads, rerun
    ) + growth(sizes)
    print(body)
    if args.section_to is not None:
        args.section_to.write_text(f"## {SECTION}\n\n{body}")
    elif not args.no_record:
        update_section(SECTION, body)


if __name__ == "__main__":
    main()

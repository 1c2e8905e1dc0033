"""Scoring speed: one million recorded events, scored from a SQLite store and from JSONL.

    python -m bench.bench_scoring              # build (once) and score a 1M-event run
    python -m bench.bench_scoring --events 200000 --no-record

The event log is what the Core records for the reference adapter under logical pacing:
proactive sessions (frame, workload, ack, step, then a silence or a streamed response per
step) and QA sessions (frames, question, streamed answer). It is written once into
bench/out/ and reused. Timings are best of --repeat runs; the result goes into the
"Scoring" section of BENCHMARKS.md (--no-record to skip). Target: under 30 s for 1M events.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import time
from pathlib import Path

from bench.report import update_section
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Trigger
from streameval.core.store.export import export_jsonl
from streameval.core.store.store import Store
from streameval.scorer.eventlog import SessionLog, store_run
from streameval.scorer.report import (
    evaluate_source,
    load_exported,
    score_exported,
    score_run,
    scores_of,
)

OUT = Path(__file__).resolve().parent / "out"
RUN_ID = "bench-scoring"
TARGET_S = 30.0
PROACTIVE_STEPS = 300  # steps per proactive session (5 min of video at 1 fps)
QA_FRAMES = 20
TASK_TYPES = ("REC", "SSR", "CRR", "stream bench proactive")


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
    """Write a run of about `events` events into a fresh SQLite store; returns the count."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    rng = random.Random(seed)
    records, logs, total, index = [], [], 0, 0
    while total < events:
        record, log = _qa(index, rng) if index % 5 == 4 else _proactive(index, rng)
        records.append(record)
        logs.append(log)
        total += len(log.events)
        index += 1
    with Store(f"sqlite:///{path}") as store:
        store_run(store, RUN_ID, records, logs, config={"profile": "trace", "pacing": "logical"})
    return total


def best_of(repeat: int, action) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = action()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-record", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    path = OUT / f"scoring-{args.events}.db"
    jsonl = OUT / f"scoring-{args.events}.jsonl"
    url = f"sqlite:///{path}"
    if not path.exists():
        started = time.perf_counter()
        total = build(path, args.events)
        print(f"wrote {total} events in {time.perf_counter() - started:.1f} s")
    with Store(url) as store:
        total = store.count_events(RUN_ID)
        if not jsonl.exists():
            with jsonl.open("w") as handle:
                export_jsonl(store, RUN_ID, handle)
        store_s, scores = best_of(args.repeat, lambda: score_run(store, RUN_ID))
    export_s, exported = best_of(args.repeat, lambda: score_exported(jsonl))
    loaded = load_exported(jsonl)
    scoring_s, _ = best_of(args.repeat, lambda: scores_of(evaluate_source(loaded)))
    same = scores.to_json() == exported.to_json()
    records = scores.records_scored
    print(f"{total} events, {records} records")
    print(f"score_run (SQLite store): {store_s:.2f} s ({total / store_s:,.0f} events/s)")
    print(f"score_exported (JSONL):   {export_s:.2f} s; scoring once read: {scoring_s:.2f} s")
    print(f"identical results: {same}")
    if not args.no_record:
        record(total, records, (store_s, export_s, scoring_s), same, args.repeat)


def record(total: int, records: int, seconds: tuple[float, float, float], same: bool, repeat: int):
    store_s, export_s, scoring_s = seconds
    verdict = "meets" if store_s < TARGET_S else "MISSES"
    body = (
        f"`python -m bench.bench_scoring` ({datetime.date.today()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}). "
        f"A synthetic run of {total:,} events ({records:,} records: proactive sessions of "
        f"{PROACTIVE_STEPS} steps and QA sessions, as the Core records the reference adapter "
        f"under logical pacing), profile trace-paper-v1, exact judge, 1,000 bootstrap "
        f"resamples per slice; best of {repeat}.\n\n"
        "| source | seconds | events/s |\n|---|---|---|\n"
        f"| `score_run`, SQLite store | {store_s:.2f} | {total / store_s:,.0f} |\n"
        f"| `score_exported`, JSONL | {export_s:.2f} | {total / export_s:,.0f} |\n"
        f"| the same log once read into memory (the rest is `read_jsonl` decoding and "
        f"validating every line) | {scoring_s:.2f} | {total / scoring_s:,.0f} |\n\n"
        f"Target: under {TARGET_S:g} s for 1,000,000 events: {verdict} it. Both sources give "
        f"identical results: {'yes' if same else 'NO'}.\n"
    )
    update_section("Scoring", body)


if __name__ == "__main__":
    main()

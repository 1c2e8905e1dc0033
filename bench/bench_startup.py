"""How fast the `streameval` command starts: `--help` of the command and of a subcommand,
and what listing the runs of a store holding 100,000 events costs next to `--help`.

    python bench/bench_startup.py            # print the tables
    python bench/bench_startup.py --write    # and put them into BENCHMARKS.md

Each command runs as a new process, as a user would type it (the installed `streameval`
script next to this Python), with warm file caches: the first run of each is discarded.
The listing is measured in CPU seconds (user + system) of its process, which other work on
the machine disturbs less than wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import update_section  # noqa: E402
from streameval.core.store.store import EventRow, Store  # noqa: E402

COMMANDS = (("streameval", "--help"), ("streameval", "runs", "--help"))
TARGET_S = 1.0
RUNS = 10
# The listing's store: this many runs, each of SESSIONS sessions of EVENTS_PER_SESSION.
STORE_RUNS, SESSIONS, EVENTS_PER_SESSION = 10, 20, 500
LISTING_TARGET = 1.5  # the listing's CPU at most this multiple of `streameval --help`'s
# What the listing cost before it read SQLite without SQLAlchemy (measured once, kept here
# so that a rerun keeps the comparison).
BEFORE = (
    "Before (2026-12-06, same machine and store, load average 5): the listing imported the "
    "runner, Alembic and the run-input checks and opened the store read-write, 1.36 CPU-s, "
    "3.9x `--help`. "
    "It now reads a SQLite file, named by its path or a plain `sqlite:///` URL, with the "
    "standard library (core_server/store/light.py, core_server/store/locations.py); a PostgreSQL "
    "store reads through `Store`."
)


def script() -> str:
    """The installed console script of this environment."""
    found = Path(sys.executable).parent / "streameval"
    if not found.is_file():
        raise SystemExit(f"no `streameval` script at {found}: pip install -e . first")
    return str(found)


def timings(command: list[str], runs: int) -> list[float]:
    """Wall seconds of `runs` fresh processes, after one discarded warm-up."""
    seconds = []
    for attempt in range(runs + 1):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        if attempt:
            seconds.append(time.perf_counter() - started)
    return seconds


def cpu_seconds(command: list[str], runs: int) -> list[float]:
    """User + system CPU seconds of `runs` fresh processes, after one discarded warm-up."""
    seconds = []
    for attempt in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if attempt:
            seconds.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return seconds


def event_rows(run_id: str, session_id: str) -> list[EventRow]:
    """A session's acknowledged frames, as the Core stores them."""
    return [
        (run_id, session_id, seq, "frame_ack", seq * 1_000_000, float(seq), f'{{"index":{seq}}}')
        for seq in range(EVENTS_PER_SESSION)
    ]


def fill_store(path: Path) -> int:
    """A SQLite store of STORE_RUNS finished runs; the number of events it holds."""
    events = 0
    with Store(f"sqlite:///{path}") as store:
        for number in range(STORE_RUNS):
            run_id = f"{number:012x}"
            adapter = {"adapter": "reference", "adapter_version": "1", "endpoint": "ws://x/ws"}
            store.create_run(run_id, "synthetic", {"profile": "trace", "pacing": "logical"})
            store.update_run_conditions(run_id, {"adapters": [adapter]})
            sessions = [f"s{k:03d}" for k in range(SESSIONS)]
            store.add_sessions(run_id, [(session, []) for session in sessions])
            for session in sessions:
                store.append_rows(event_rows(run_id, session))
            store.set_run_status(run_id, "finished")
            events += store.count_events(run_id)
    return events


def load_average() -> str:
    return "{:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())


def bench(runs: int = RUNS) -> str:
    executable = script()
    load_before = load_average()
    rows = []
    for command in COMMANDS:
        seconds = timings([executable, *command[1:]], runs)
        median = statistics.median(seconds)
        verdict = "meets it" if median < TARGET_S else "MISSES it"
        rows.append(
            f"| `{' '.join(command)}` | {median:.3f} | {min(seconds):.3f} | "
            f"{max(seconds):.3f} | {verdict} |\n"
        )
    return (
        f"Each command started {runs} times as a new process (after one discarded warm-up), "
        f"output to /dev/null. Target: well under {TARGET_S:.0f} s on a quiet machine. "
        f"1/5/15-minute load average before: {load_before}.\n\n"
        "| command | median (s) | min (s) | max (s) | target < 1 s |\n|---|---|---|---|---|\n"
        + "".join(rows)
    )


def bench_listing(runs: int = RUNS) -> str:
    """CPU of `streameval runs` on a store of 100,000 events against `streameval --help`:
    the store named by its path, then by a `sqlite:///` URL (which SQLAlchemy parses)."""
    executable = script()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        events = fill_store(path)
        load_before = load_average()
        help_cpu = statistics.median(cpu_seconds([executable, "--help"], runs))
        rows = []
        for shown, store in (("runs.db", str(path)), ("sqlite:///runs.db", f"sqlite:///{path}")):
            listing = cpu_seconds([executable, "runs", "--store", store], runs)
            median = statistics.median(listing)
            ratio = median / help_cpu
            verdict = "meets it" if ratio <= LISTING_TARGET else "MISSES it"
            rows.append(
                f"| `streameval runs --store {shown}` | {median:.3f} | {min(listing):.3f} | "
                f"{max(listing):.3f} | {ratio:.2f} | {verdict} |\n"
            )
    return (
        f"CPU seconds (user + system) of each command's process, median of {runs} (after one "
        f"discarded warm-up); the store: {STORE_RUNS} runs, {STORE_RUNS * SESSIONS} sessions, "
        f"{events:,} events in one SQLite file. Target: the listing at most "
        f"{LISTING_TARGET:g}x `streameval --help`. 1/5/15-minute load average before: "
        f"{load_before}.\n\n"
        f"| command | median CPU (s) | min (s) | max (s) | x `--help` | target <= "
        f"{LISTING_TARGET:g}x |\n|---|---|---|---|---|---|\n"
        f"| `streameval --help` | {help_cpu:.3f} | | | 1.00 | |\n" + "".join(rows) + f"\n{BEFORE}\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    body = bench(args.runs)
    print(body)
    listing = bench_listing(args.runs)
    print(listing)
    if args.write:
        machine = f"{platform.machine()}, {os.cpu_count()} cores"
        header = (
            f"Measured {date.today()} on {machine}, Python {platform.python_version()}; "
            "rerun: `python bench/bench_startup.py --write`.\n\n"
        )
        update_section("CLI start-up", header + body)
        update_section("Listing runs of a large store", header + listing)


if __name__ == "__main__":
    main()

"""How fast the `streameval` command starts: `--help` of the command and of a subcommand.

    python bench/bench_startup.py            # print the table
    python bench/bench_startup.py --write    # and put it into BENCHMARKS.md

Each command runs as a new process, as a user would type it (the installed `streameval`
script next to this Python), with warm file caches: the first run of each is discarded.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.report import update_section  # noqa: E402

COMMANDS = (("streameval", "--help"), ("streameval", "runs", "--help"))
TARGET_S = 1.0
RUNS = 10


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    body = bench(args.runs)
    print(body)
    if args.write:
        machine = f"{platform.machine()}, {os.cpu_count()} cores"
        header = (
            f"Measured {date.today()} on {machine}, Python {platform.python_version()}; "
            "rerun: `python bench/bench_startup.py --write`.\n\n"
        )
        update_section("CLI start-up", header + body)


if __name__ == "__main__":
    main()

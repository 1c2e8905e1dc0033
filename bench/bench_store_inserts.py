"""What storing a frame's two events costs the store, with and without an index on kind.

    python bench/bench_store_inserts.py [--rounds N]

A real SQLite store (`Store`, migrations and pragmas as the Core opens it) takes the rows of
the throughput benchmark's run (64 sessions x 600 frames, `frame_sent` and `frame_ack` per
frame, 8 sessions interleaved at a time, as they reach the writer) through `append_rows`
in the writer's batches of 5,000. 'With the kind index' adds the index that migration 0008
dropped. CPU seconds of this process per row; the rounds alternate the two stores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from streameval.core.session.recorder import frame_sent_payload  # noqa: E402
from streameval.core.store.store import EventRow, Store  # noqa: E402
from streameval.core.store.writer import BATCH_SIZE  # noqa: E402

SESSIONS, FRAMES, AT_ONCE = 64, 600, 8
RUN = "0123456789ab"


def rows() -> list[EventRow]:
    made: list[EventRow] = []
    names = [f"throughput:{k:05d}" for k in range(SESSIONS)]
    for first in range(0, SESSIONS, AT_ONCE):
        for index in range(FRAMES):
            for session in names[first : first + AT_ONCE]:
                payload = frame_sent_payload(
                    index=index,
                    frame_id=f"0123456789abcdef:{index * 10}",
                    t=float(index),
                    source_t=None,
                    scheduled_ns=None,
                    lag_ns=None,
                    nbytes=14_000,
                    width=320,
                    height=180,
                )
                now = time.monotonic_ns()
                made.append((RUN, session, 2 * index, "frame_sent", now, float(index), payload))
                ack = f'{{"index":{index}}}'
                made.append((RUN, session, 2 * index + 1, "frame_ack", now, float(index), ack))
    return made


def cpu_per_row(folder: Path, events: list[EventRow], kind_index: bool) -> float:
    path = folder / f"store-{kind_index}-{time.monotonic_ns()}.db"
    with Store(f"sqlite:///{path}") as store:
        store.create_run(RUN, "bench", {})
        store.add_sessions(RUN, [(f"throughput:{k:05d}", []) for k in range(SESSIONS)])
        if kind_index:
            with store.engine.begin() as conn:
                conn.exec_driver_sql("CREATE INDEX ix_events_run_id_kind ON events (run_id, kind)")
        started = time.process_time()
        for first in range(0, len(events), BATCH_SIZE):
            store.append_rows(events[first : first + BATCH_SIZE])
        return (time.process_time() - started) / len(events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    events = rows()
    times: dict[bool, list[float]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for kind_index in (round_ % 2 == 0, round_ % 2 == 1):
                times[kind_index].append(cpu_per_row(Path(folder), events, kind_index))
    without, with_ = (statistics.median(times[flag]) * 1e6 for flag in (False, True))
    print(f"{len(events):,} rows, {args.rounds} rounds, median CPU per row:")
    print(f"  with the kind index:    {with_:.2f} us")
    print(f"  without it (0008):      {without:.2f} us ({1 - without / with_:.0%} less)")


if __name__ == "__main__":
    main()

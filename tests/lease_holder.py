"""A process that holds leases on a store, for the clock-skew tests (test_lease_clock.py):
run with tests/skewed_clock on its PYTHONPATH, its clock is wrong by the skew asked for.

    python -m tests.lease_holder run URL RUN LEASE_S HOST      # owns RUN like a Core
    python -m tests.lease_holder sessions URL RUN LEASE_S HOST # claims RUN's free sessions

It prints one JSON line once it holds what it could take (its own `now`, its pid, the
sessions it claimed; or the line refusing it the run), then renews on each line of stdin,
printing whether it still holds everything, until stdin closes.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime

from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.run_lease import RunOwned, acquire_run, renew_run
from streameval.core.store.store import Store


def say(**fields: object) -> None:
    print(json.dumps({"now": datetime.now(UTC).isoformat(), "pid": os.getpid(), **fields}))
    sys.stdout.flush()


def main(kind: str, url: str, run_id: str, lease_s: str, host: str) -> None:
    identity = WorkerIdentity(f"{host}:{os.getpid()}:holder", host)
    with Store(url) as store:
        if kind == "run":
            try:
                acquire_run(store, run_id, identity, float(lease_s))
            except RunOwned as exc:
                say(refused=str(exc))
                return
            say()
            for _ in sys.stdin:
                say(held=renew_run(store, run_id, identity, float(lease_s)))
            return
        queue = SessionQueue(store, identity, float(lease_s))
        claimed = []
        while (session := queue.claim(run_id)) is not None:
            claimed.append(session.session_id)
        say(claimed=claimed)
        for _ in sys.stdin:
            say(held=not queue.renew(run_id, claimed))


if __name__ == "__main__":
    main(*sys.argv[1:])

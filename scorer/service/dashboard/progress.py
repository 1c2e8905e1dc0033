"""Live progress of a run: sessions by status, stored events, and events per second.

The rate is measured by the API itself between successive polls (event counts read from the
store, timed with the API's monotonic clock), so it works whichever machine the Core runs on
and drops to zero when a run stalls. The Core's own event timestamps could not show a stall:
its clock is not readable from here.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from streameval.core.store.models import SESSION_STATUSES
from streameval.core.store.store import SessionInfo, Store

RATE_WINDOW_S = 10.0  # events per second are averaged over (at most) this many seconds
_TRACKED_RUNS = 64  # runs whose recent counts are kept


class SessionProgress(BaseModel):
    session_id: str
    status: str
    attempt: int
    endpoint: str | None
    started_at: datetime | None
    finished_at: datetime | None
    failure_stage: str | None
    failure_reason: str | None
    host: str | None = Field(description="the machine of the worker that ran it")
    worker_id: str | None
    gpu: str | None = Field(description="the accelerator the adapter reported in its hello")


class WorkerProgress(BaseModel):
    """One worker's share of the run (a scaled-out run has many: docs/scale.md)."""

    worker_id: str
    host: str | None
    sessions: int
    running: int
    finished: int
    failed: int


class RunProgress(BaseModel):
    run_id: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    elapsed_s: float = Field(description="since the run was created, until it ended or now")
    sessions_total: int
    sessions: dict[str, int] = Field(description="sessions per status, every status listed")
    done: int = Field(description="finished + failed sessions")
    events: int
    events_per_s: float | None = Field(
        description=f"stored events per second over the last {RATE_WINDOW_S:g} s of polls "
        "of this endpoint (None on the first poll)"
    )
    mean_events_per_s: float | None = Field(description="events / elapsed_s")
    running: list[SessionProgress]
    failed: list[SessionProgress]
    workers: list[WorkerProgress] = Field(description="by worker id; sessions not yet run: none")


class RateMeter:
    """Events per second of each run, from the counts seen at successive polls."""

    def __init__(
        self, window_s: float = RATE_WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._window_s = window_s
        self._clock = clock
        self._samples: OrderedDict[str, deque[tuple[float, int]]] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, run_id: str, events: int) -> float | None:
        """Record the count seen now; the rate since the oldest sample still in the window."""
        now = self._clock()
        with self._lock:
            samples = self._samples.setdefault(run_id, deque())
            self._samples.move_to_end(run_id)
            while len(self._samples) > _TRACKED_RUNS:
                self._samples.popitem(last=False)
            samples.append((now, events))
            # Keep one sample at or before the window's start so the span covers the window.
            while len(samples) > 1 and samples[1][0] <= now - self._window_s:
                samples.popleft()
            first_t, first_events = samples[0]
            if first_t < now - 2 * self._window_s:  # nobody polled for a while: no recent rate
                while len(samples) > 1:
                    samples.popleft()
                return None
            if len(samples) == 1:
                return None
            return max(0, events - first_events) / (now - first_t)


def _session(info: SessionInfo) -> SessionProgress:
    return SessionProgress(
        session_id=info.session_id,
        status=info.status,
        attempt=info.attempt,
        endpoint=info.endpoint,
        started_at=info.started_at,
        finished_at=info.finished_at,
        failure_stage=info.failure_stage,
        failure_reason=info.failure_reason,
        host=info.host,
        worker_id=info.worker_id,
        gpu=(info.adapter or {}).get("gpu"),
    )


def _workers(sessions: list[SessionInfo]) -> list[WorkerProgress]:
    shares: dict[str, WorkerProgress] = {}
    for session in sessions:
        if session.worker_id is None:
            continue
        share = shares.setdefault(
            session.worker_id,
            WorkerProgress(
                worker_id=session.worker_id, host=session.host,
                sessions=0, running=0, finished=0, failed=0,
            ),
        )  # fmt: skip
        share.sessions += 1
        if session.status in ("running", "finished", "failed"):
            setattr(share, session.status, getattr(share, session.status) + 1)
    return [shares[worker] for worker in sorted(shares)]


def run_progress(store: Store, run_id: str, meter: RateMeter) -> RunProgress:
    info = store.get_run(run_id)
    sessions = store.sessions(run_id)
    events = store.count_events(run_id)
    counts = dict.fromkeys(SESSION_STATUSES, 0)
    for session in sessions:
        counts[session.status] = counts.get(session.status, 0) + 1
    elapsed = ((info.finished_at or datetime.now(UTC)) - info.created_at).total_seconds()
    return RunProgress(
        run_id=run_id,
        status=info.status,
        created_at=info.created_at,
        finished_at=info.finished_at,
        elapsed_s=elapsed,
        sessions_total=len(sessions),
        sessions=counts,
        done=counts["finished"] + counts["failed"],
        events=events,
        events_per_s=meter.observe(run_id, events),
        mean_events_per_s=events / elapsed if elapsed > 0 else None,
        running=[_session(s) for s in sessions if s.status == "running"],
        failed=[_session(s) for s in sessions if s.status == "failed"],
        workers=_workers(sessions),
    )

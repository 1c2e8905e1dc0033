"""Staggered starts (core_server/run/worker.py `start_rate`): a worker's slots make their
first claims `start_rate` a second, not all at once, so thousands of wall-clock sessions do
not connect in one storm. Real SQLite store and Worker; the checked bound is a lower one
(a sleep never ends early), so a loaded machine cannot fail it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streameval.core.config import EndpointConfig
from streameval.core.run.runner import start_rate_for
from streameval.core.run.worker import Worker
from streameval.core.session.driver import SessionOutcome
from streameval.core.store.store import SessionInfo, Store
from streameval.core.store.writer import EventWriter


class StartTimes:
    """Records when each session began (the event loop's clock) and holds it until all
    `together` began (or 60 s passed): a slot cannot run the others' sessions."""

    def __init__(self, together: int) -> None:
        self.together = together
        self.started: list[float] = []
        self.all_started = asyncio.Event()

    async def run_claimed(
        self,
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None] | None = None,
    ) -> SessionOutcome:
        self.started.append(asyncio.get_running_loop().time())
        if len(self.started) == self.together:
            self.all_started.set()
        await asyncio.wait_for(self.all_started.wait(), 60)
        writer.put_session_status(session.run_id, session.session_id, "finished")
        return SessionOutcome(session.session_id, "finished")


async def started_at(
    tmp_path, start_rate: float, sessions: int = 5, slots: int = 5
) -> tuple[float, list[float]]:
    """`sessions` sessions over `slots` slots (the worker given 60 s at most): the loop's
    time before the worker ran, and each session's start."""
    runner = StartTimes(min(sessions, slots))

    async def runner_for(_run_id: str) -> StartTimes:
        return runner

    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create_run("run", "synthetic", {})
        store.add_sessions("run", [(f"s{k}", ["r"]) for k in range(sessions)])
        endpoint = EndpointConfig(url="ws://127.0.0.1:1/ws", concurrency=slots)
        worker = Worker(store, [endpoint], runner_for, poll_s=0.01, start_rate=start_rate)
        before = asyncio.get_running_loop().time()
        summary = await asyncio.wait_for(worker.run("run"), 60)
    assert summary.finished == sessions
    return before, sorted(runner.started)


async def test_slots_start_at_the_start_rate(tmp_path):
    before, started = await started_at(tmp_path, start_rate=4.0)
    # Slot k claims its first session k / 4 s after the worker started, not before.
    assert [round(t - before, 2) >= k / 4 for k, t in enumerate(started)] == [True] * 5


async def test_slots_beyond_the_sessions_stop_waiting_once_the_run_is_drained(tmp_path):
    # 200 slots at 2 a second would wait up to 99.5 s for their first claim; the run is
    # drained after its 3 sessions, and the worker ends well within its 60 s.
    _, started = await started_at(tmp_path, start_rate=2.0, sessions=3, slots=200)
    assert len(started) == 3


def test_the_default_rate_starts_the_concurrency_within_10_s_and_50_a_second_at_least():
    assert [start_rate_for(n) for n in (1, 500, 2000, 10_000)] == [50.0, 50.0, 200.0, 1000.0]

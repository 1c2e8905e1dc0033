"""A worker: claim sessions from the store's queue, run them, keep their leases alive.

`streameval run` drives its run with one in-process worker; `streameval worker` processes on
many machines (Slurm array tasks, Kubernetes pods, compose replicas) share a run through a
PostgreSQL store the same way. Each endpoint gets as many slots as its concurrency (scaled
down to what this process can hold, capacity.py); a slot claims a session, runs it, and
claims the next until none is left. While sessions run, one task renews their leases every
third of the lease; a session whose lease was lost (the worker stalled past it and someone
else took the session) is cancelled here, and its events are refused by the store. When the
worker stops early (Ctrl-C, SIGTERM), the sessions it holds go back to pending at once
instead of waiting for their leases to expire. While its sessions stream, a worker may
decode the videos of the sessions it will claim next (decoding_ahead.py); its summary lists
the sessions that still waited for a decode.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from streameval.core.config import EndpointConfig
from streameval.core.run.capacity import session_capacity, slots_per_endpoint
from streameval.core.run.collector import fewer_pauses
from streameval.core.run.decoding_ahead import DecodingAhead
from streameval.core.run.endpoint_health import INFRA_RETRIES, EndpointPool
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S, DEFAULT_LEASE_S
from streameval.core.session.driver import SessionOutcome
from streameval.core.session.readiness import Notice
from streameval.core.store.queue import SessionQueue, WorkerIdentity, sessions_left
from streameval.core.store.store import SessionInfo, Store, StoreError
from streameval.core.store.writer import EventWriter
from streameval.core.store.writer_process import StoreProcess, child_url

# Claims and status changes take SQLite's one write lock: a second thread would only wait on
# it. PostgreSQL claims in parallel (SKIP LOCKED), so a few threads help there.
CLAIM_THREADS = {"sqlite": 1}
CLAIM_THREADS_DEFAULT = 4
# From this many sessions at once the event writer's store calls run in a process of their
# own (store_process.py). Below it the store's share of the interpreter lock delays no frame
# measurably, and a process would only add its start to every small run.
STORE_PROCESS_SLOTS = 64
logger = logging.getLogger(__name__)
T = TypeVar("T")


def this_worker() -> WorkerIdentity:
    """A worker id unique across machines and restarts: host, process, random suffix."""
    host = socket.gethostname()
    return WorkerIdentity(f"{host}:{os.getpid()}:{uuid.uuid4().hex[:6]}", host)


def finish_run_if_done(store: Store, run_id: str) -> str | None:
    """Set the run's final status once every session ended: `failed` when all failed,
    `finished` otherwise. None while sessions are still pending or running."""
    sessions = store.sessions(run_id)
    if any(session.status in ("pending", "running") for session in sessions):
        return None
    failed = sum(session.status == "failed" for session in sessions)
    status = "failed" if sessions and failed == len(sessions) else "finished"
    store.set_run_status(run_id, status)
    return status


class ClaimedSessionRunner(Protocol):
    async def run_claimed(
        self,
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None],
    ) -> SessionOutcome:
        """Run the session; call `frames_ready` once its frames are ready (or cannot be)."""

    async def prepare_ahead(self, sessions: list[SessionInfo]) -> None:
        """Decode the frames these sessions will need (a worker with `look_ahead` only)."""


@dataclass(frozen=True)
class DecodeWait:
    """A session that waited for its video's frames to be decoded before it could start:
    `claim` is its place (1, 2, ...) in the order this worker claimed sessions."""

    run_id: str
    session_id: str
    video: str
    wait_s: float
    claim: int


@dataclass
class WorkerSummary:
    worker_id: str
    host: str
    claimed: int = 0
    finished: int = 0
    failed: int = 0
    lost: int = 0  # sessions whose lease this worker lost; another attempt counts for them
    failures: list[SessionOutcome] = field(default_factory=list)
    runs: set[str] = field(default_factory=set)
    # Sessions that waited for a decode, and the video of this worker's first claim: after
    # that one, a worker decoding ahead (`look_ahead`) leaves no session waiting.
    decode_waits: list[DecodeWait] = field(default_factory=list)
    first_video: str | None = None

    def decode_report(self) -> dict[str, object]:
        """The decode waits as the `--json` summaries of `run` and `worker` print them."""
        waits = sorted(self.decode_waits, key=lambda wait: wait.claim)
        return {
            "first_video": self.first_video,
            "decode_waits": [dataclasses.asdict(wait) for wait in waits],
        }


ProgressCallback = Callable[[SessionOutcome, WorkerSummary], None]


class Worker:
    def __init__(
        self,
        store: Store,
        endpoints: list[EndpointConfig],
        runner_for: Callable[[str], Awaitable[ClaimedSessionRunner]],
        *,
        identity: WorkerIdentity | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        poll_s: float | None = None,
        progress: ProgressCallback | None = None,
        give_up_s: float = ALL_DOWN_GIVE_UP_S,
        notice: Notice | None = None,
        capacity: int | None = None,
        look_ahead: int = 0,
        start_rate: float | None = None,
    ) -> None:
        """`capacity`: sessions this process may hold at once (default: what its open-file
        limit allows, capacity.py); the endpoints' slots are scaled down to fit in it.
        `look_ahead`: after each claim, the frames of the next this many sessions the queue
        would hand out are decoded in the background (0: none). `start_rate`: slots make
        their first claim this many per second, not all at once (None: all at once)."""
        self.store = store
        self.capacity = capacity if capacity is not None else session_capacity()
        self.endpoints = endpoints
        self.runner_for = runner_for
        self.identity = identity or this_worker()
        self.queue = SessionQueue(store, self.identity, lease_s)
        self.lease_s = lease_s
        self.poll_s = poll_s if poll_s is not None else min(1.0, lease_s / 4)
        self.progress = progress
        self.summary = WorkerSummary(self.identity.worker_id, self.identity.host)
        # The sessions whose leases this worker renews; None until its task starts.
        self._held: dict[tuple[str, str], asyncio.Task[SessionOutcome] | None] = {}
        self.health = EndpointPool([e.url for e in endpoints], give_up_s=give_up_s, notice=notice)
        # New attempts given to sessions whose endpoint failed before their first task.
        self._infra_retries: dict[tuple[str, str], int] = {}
        # The worker's store calls run on threads of their own, not asyncio's default pool
        # (which the event writer uses): thousands of slots claiming at once would otherwise
        # queue the writes, and the lease renewals behind them until the leases expired.
        # Renewals get their own thread: nothing delays them.
        self._claims: ThreadPoolExecutor | None = None
        self._renewals: ThreadPoolExecutor | None = None
        # Runs (None: any run) found with nothing left to claim: thousands of slots ending
        # at once each asked the store again, and the event loop waited for those calls.
        self._drained: set[str | None] = set()
        self._drained_now = asyncio.Event()  # set with each run found drained
        self._given_back = 0  # sessions this worker gave back to the queue, ever
        self.ahead = DecodingAhead(look_ahead, self._upcoming, runner_for)
        self.start_rate = start_rate

    async def run(
        self, run_id: str | None = None, max_sessions: int | None = None, follow: bool = False
    ) -> WorkerSummary:
        """Claim and run sessions (of `run_id`, or of any run) until none is left, or until
        `max_sessions` were claimed; with `follow`, wait for new runs instead of stopping."""
        counts = slots_per_endpoint([e.concurrency for e in self.endpoints], self.capacity)
        dialect = self.store.engine.dialect.name
        threads = CLAIM_THREADS.get(dialect, CLAIM_THREADS_DEFAULT)
        self._claims = ThreadPoolExecutor(threads, "streameval-claims")
        self._renewals = ThreadPoolExecutor(1, "streameval-renewals")
        self._drained.clear()
        self._drained_now.clear()
        event_store = self._event_store(sum(counts))
        try:
            with fewer_pauses():
                return await self._run(run_id, max_sessions, follow, counts, event_store)
        finally:
            self._claims.shutdown(wait=False)
            self._renewals.shutdown(wait=False)
            if isinstance(event_store, StoreProcess):
                await asyncio.to_thread(event_store.close)

    def _event_store(self, slots: int) -> Store | StoreProcess:
        """What the event writer stores through: a process of its own from
        STORE_PROCESS_SLOTS sessions at once, this worker's store below that."""
        url = child_url(self.store) if slots >= STORE_PROCESS_SLOTS else None
        return self.store if url is None else StoreProcess(url)

    async def _run(
        self,
        run_id: str | None,
        max_sessions: int | None,
        follow: bool,
        counts: list[int],
        event_store: Store | StoreProcess,
    ) -> WorkerSummary:
        # The writer makes only the two calls StoreProcess answers.
        writer = EventWriter(event_store, owner=self.identity.worker_id)  # type: ignore[arg-type]
        await writer.start()
        keeper = asyncio.create_task(self._keep_leases(), name="streameval-leases")
        # Slots start round-robin over the endpoints: fewer sessions than slots still
        # spread over every replica instead of filling the first one's.
        turns = [
            endpoint
            for turn in range(max(counts, default=0))
            for endpoint, count in zip(self.endpoints, counts, strict=True)
            if turn < count
        ]
        slots = [
            asyncio.create_task(self._slot(endpoint, writer, run_id, max_sessions, follow, n))
            for n, endpoint in enumerate(turns)
        ]
        running = asyncio.gather(*slots)
        # A store write that failed for good stops the worker at once (one error), instead
        # of every session running on into a writer that stores nothing.
        store_failed = asyncio.ensure_future(writer.wait_failed())
        try:
            await asyncio.wait({running, store_failed}, return_when=asyncio.FIRST_COMPLETED)
            if store_failed.done():
                raise store_failed.result()
            await running
        except BaseException:
            held = list(self._held)
            for slot in slots:
                slot.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            if running.done() and not running.cancelled():
                running.exception()  # retrieved: the error in flight is reported instead
            # The error in flight is the one to report: a store that failed fails these too.
            with contextlib.suppress(StoreError):
                await writer.close()
            await asyncio.to_thread(self._give_back, held)
            raise
        finally:
            keeper.cancel()
            store_failed.cancel()
            await self.ahead.stop()
        await writer.close()
        for run in sorted(self.summary.runs):
            await asyncio.to_thread(finish_run_if_done, self.store, run)
        return self.summary

    async def _slot(
        self,
        endpoint: EndpointConfig,
        writer: EventWriter,
        run_id: str | None,
        max_sessions: int | None,
        follow: bool,
        place: int,
    ) -> None:
        if self.start_rate is not None and place:
            # A storm of sessions connecting and starting at once delays every stream on a
            # loaded machine; a session's stream time starts when it starts, so none is late.
            # Slots beyond the sessions there are stop waiting once the run is drained.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained_now.wait(), place / self.start_rate)
        while max_sessions is None or self.summary.claimed < max_sessions:
            if not self.health.up(endpoint.url):
                # Out of rotation: re-probe it while there is work it could take.
                left = functools.partial(sessions_left, self.store, run_id)
                if not follow and not await self._claiming(self.store.retrying, left):
                    return
                await self.health.reprobe(endpoint.url)
                continue
            if run_id in self._drained and not follow:
                return
            given_back = self._given_back
            # Through a PostgreSQL restart: the store retries transient errors for a while.
            claim = functools.partial(self.queue.claim, run_id, endpoint.url)
            session = await self._claiming(self.store.retrying, claim)
            if session is None:
                # Sessions other workers hold may still come back (their worker may die).
                outstanding = functools.partial(self.queue.outstanding, run_id)
                if follow or await self._claiming(self.store.retrying, outstanding):
                    await asyncio.sleep(self.poll_s)
                    continue
                if self._given_back == given_back:  # none came back while this slot looked
                    self._drained.add(run_id)
                    self._drained_now.set()
                return
            self.summary.claimed += 1
            claim = self.summary.claimed
            if session.run_id not in self.summary.runs:
                self.summary.runs.add(session.run_id)
                await self._claiming(self.store.set_run_status, session.run_id, "running")
            await self._run_one(session, endpoint, writer, claim)

    async def _run_one(
        self, session: SessionInfo, endpoint: EndpointConfig, writer: EventWriter, claim: int
    ) -> None:
        key = (session.run_id, session.session_id)
        # Held from the claim on: building the run's executor (loading its benchmark) may
        # take longer than a lease, which must not expire meanwhile.
        self._held[key] = None
        try:
            runner = await self.runner_for(session.run_id)
        except BaseException:  # not admitted to the run (changed adapter, ...): hand it back
            self._held.pop(key, None)
            await self._claiming(self.queue.release, *key)
            raise
        if key not in self._held:  # its lease was lost all the same (a store gone too long)
            self.summary.lost += 1
            return
        # Decoding ahead starts once this session streams, not while its own video decodes.
        ready = functools.partial(self.ahead.wanted, session.run_id)
        task = asyncio.create_task(runner.run_claimed(session, endpoint, writer, ready))
        self._held[key] = task
        try:
            await self._settle(task, session, endpoint, writer, claim)
        finally:
            # Held, its lease renewed, until its end is stored: a session whose status still
            # waited in the writer's queue expired and was claimed again as if abandoned.
            self._held.pop(key, None)

    async def _settle(
        self,
        task: asyncio.Task[SessionOutcome],
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        claim: int,
    ) -> None:
        key = (session.run_id, session.session_id)
        try:
            outcome = await task
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # this worker is stopping
                raise
            self.summary.lost += 1  # the lease keeper gave the session up
            return
        self._count_decode_wait(session, outcome, claim)
        if outcome.before_first_task:
            self.health.mark_down(endpoint.url, outcome.reason or "unreachable")
            if await self._lost(session) or await self._retry_elsewhere(session, writer):
                return
            writer.put_session_status(
                *key, outcome.status, stage=outcome.stage, reason=outcome.reason,
                cause=outcome.cause, adapter=outcome.adapter,
            )  # fmt: skip
        await writer.flush()  # the session's end is stored before the run may be finalised
        if await self._lost(session):
            return
        if outcome.status == "finished":
            self.summary.finished += 1
        else:
            self.summary.failed += 1
            self.summary.failures.append(outcome)
        if self.progress is not None:
            self.progress(outcome, self.summary)

    async def _lost(self, session: SessionInfo) -> bool:
        """Whether another worker took the session over, counted `lost` then. A worker that
        stalled past its lease may end the session on waking before its lease keeper
        learns the lease is gone; the store refuses that end."""
        ran_last = functools.partial(self.queue.ran_last, session)
        if await self._claiming(self.store.retrying, ran_last):
            return False
        self.summary.lost += 1
        return True

    def _count_decode_wait(self, session: SessionInfo, outcome: SessionOutcome, claim: int) -> None:
        if claim == 1:
            self.summary.first_video = outcome.video
        if outcome.decode_wait_s > 0 and outcome.video is not None:
            wait = round(outcome.decode_wait_s, 3)
            self.summary.decode_waits.append(
                DecodeWait(session.run_id, session.session_id, outcome.video, wait, claim)
            )

    async def _retry_elsewhere(self, session: SessionInfo, writer: EventWriter) -> bool:
        """Give a session whose endpoint failed before its first task back to the queue as a
        new attempt (its failed attempt's events are deleted), up to INFRA_RETRIES times."""
        key = (session.run_id, session.session_id)
        tried = self._infra_retries.get(key, 0)
        if tried >= INFRA_RETRIES:
            return False
        self._infra_retries[key] = tried + 1
        await writer.flush()  # the attempt's events are stored before release deletes them
        release = functools.partial(self.queue.release, *key)
        await self._claiming(self.store.retrying, release)
        self._given_back += 1
        self._drained.clear()  # there is work again
        self._drained_now.clear()
        return True

    async def _keep_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            by_run: dict[str, list[str]] = {}
            for run_id, session_id in list(self._held):
                by_run.setdefault(run_id, []).append(session_id)
            for run_id, session_ids in by_run.items():
                try:
                    renew = functools.partial(self.queue.renew, run_id, session_ids)
                    lost = await asyncio.get_running_loop().run_in_executor(self._renewals, renew)
                except StoreError as exc:
                    # A store that blinked: try again next round (a third of a lease later);
                    # only a store gone for a whole lease loses the sessions to others.
                    logger.warning("cannot renew leases in run %s: %s", run_id, exc)
                    continue
                for session_id in lost:
                    task = self._held.get((run_id, session_id))
                    if task is not None:
                        task.cancel()
                    else:  # not started yet: it never will be (_run_one)
                        self._held.pop((run_id, session_id), None)

    async def _upcoming(self, run_id: str, limit: int) -> list[SessionInfo]:
        upcoming = functools.partial(self.queue.upcoming, run_id, limit)
        return await self._claiming(self.store.retrying, upcoming)

    async def _claiming(self, call: Callable[..., T], *args: object) -> T:
        """`call(*args)` on the worker's claim threads."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._claims, functools.partial(call, *args))

    def _give_back(self, held: list[tuple[str, str]]) -> None:
        for run_id, session_id in held:
            try:
                self.store.retrying(functools.partial(self.queue.release, run_id, session_id))
            except StoreError as exc:  # the store is gone: the lease expires by itself
                logger.info("cannot give session %s back: %s", session_id, exc)
                return

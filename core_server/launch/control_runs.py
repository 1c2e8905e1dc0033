"""The control API's runs: POST /runs starts one in the background, GET /runs/{run_id}
reports it. BackgroundRuns holds the executions in flight and why any of them crashed.

An endpoint that cannot be used is reported with one message, and no sooner than the run's
connect timeout, whatever the reason (refused, filtered, not ready, not an adapter): the
API is not a port scanner.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from streameval.core.config import RunConfig
from streameval.core.errors import CoreError
from streameval.core.launch.control_adapters import store_unavailable
from streameval.core.launch.control_run_config import RunRequest, config_for
from streameval.core.run.runner import RunExecutor
from streameval.core.store.retry import retry_deadline
from streameval.core.store.store import Store, StoreError

UNREACHABLE = "adapter endpoint not reachable, not ready or not a streameval adapter"
_UNSETTLED = ("created", "running")  # run statuses that a crashed execution leaves behind
# The control API's logger (docs/security.md names it), wherever its routes live.
log = logging.getLogger("streameval.core.launch.control_api")


class RunStatus(BaseModel):
    run_id: str
    status: str
    sessions: dict[str, int]
    config_hash: str
    reason: str | None = Field(
        default=None,
        description="why the run's background execution ended with an error (crashed or "
        "stopped), when it did",
    )


class BackgroundRuns:
    """The runs started over the API, executing as tasks of the server's event loop, and
    the reason of each that crashed (kept in memory: the store may be why it crashed)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._tasks: dict[str, asyncio.Task] = {}
        self._crashes: dict[str, str] = {}  # run id -> why its background execution crashed

    def start(self, executor: RunExecutor, run_id: str) -> None:
        """Execute the prepared run `run_id` in the background."""
        task = asyncio.create_task(_execute(executor, run_id))
        task.add_done_callback(lambda done: self._note_crash(run_id, done))
        self._tasks[run_id] = task

    def status(self, run_id: str) -> RunStatus:
        """The run's status, its sessions per status and why it crashed, if it did."""
        run = self._store.get_run(run_id)
        counts = Counter(session.status for session in self._store.sessions(run_id))
        reason = self._crashes.get(run_id)
        crashed = reason is not None and run.status in _UNSETTLED
        return RunStatus(
            run_id=run_id,
            # A crash the store could not record is still a failed run.
            status="failed" if crashed else run.status,
            sessions=dict(counts),
            config_hash=run.config_hash,
            reason=reason,
        )

    async def stop(self) -> None:
        """Cancel every execution still in flight and wait for them to end."""
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def _note_crash(self, run_id: str, task: asyncio.Task) -> None:
        """A background run that raised: logged, and its run marked failed with the reason
        (GET /runs/{id} shows both), instead of an exception nobody retrieves."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        self._crashes[run_id] = reason
        log.error("run %s crashed: %s", run_id, reason, exc_info=exc)
        try:
            # A status the runner recorded on its way out (`interrupted` when every replica
            # was gone: resumable) is kept; a run left `created` or `running` failed.
            if self._store.get_run(run_id).status in _UNSETTLED:
                self._store.set_run_status(run_id, "failed")
        except StoreError as failed:
            # The store may be why it crashed: the reason is still served from memory.
            log.error("run %s: cannot record its failure: %s", run_id, failed)


async def _execute(executor: RunExecutor, run_id: str) -> None:
    # The task inherits the request's store deadline (streameval/web_readiness.py); a run
    # waits out a store restart as every run does.
    with retry_deadline(None):
        await executor.execute(run_id)


def runs_router(store: Store, runs: BackgroundRuns) -> APIRouter:
    """POST /runs starts a run, GET /runs/{run_id} reports one."""
    router = APIRouter(tags=["runs"])

    @router.post("/runs", status_code=202, response_model=RunStatus)
    async def start_run(request: RunRequest) -> RunStatus:
        """Start a run on registered adapters (or a full config); it runs in the background."""
        config = config_for(request, store)
        executor = RunExecutor(config, store)
        started = time.monotonic()
        try:
            run_id = await executor.prepare()
        except StoreError as exc:
            raise store_unavailable(exc) from None
        except CoreError as exc:
            if _is_unreachable(exc):
                raise await _unreachable(config, started) from None
            raise HTTPException(422, str(exc)) from None
        runs.start(executor, run_id)
        return runs.status(run_id)

    @router.get("/runs/{run_id}", response_model=RunStatus)
    def run_status(run_id: str) -> RunStatus:
        """A run's status, its sessions per status and why it ended with an error, if it did."""
        try:
            return runs.status(run_id)
        except StoreError as exc:
            # StoreError's text names the store (a path or a host): not for API clients.
            if str(exc).startswith("unknown run id"):
                raise HTTPException(404, f"unknown run id {run_id!r}") from None
            raise store_unavailable(exc) from None

    return router


def _is_unreachable(exc: CoreError) -> bool:
    """Whether the run could not start because an endpoint could not be used: refused,
    timed out, an HTTP error, not ready, an /info that is missing, too big, not JSON or
    without valid conditions. endpoint_admission.check_endpoint words each "adapter endpoint
    URL ..." or (readiness) "adapter at URL ...", which may quote what the peer said; a
    profile conflict of a real adapter ("adapter NAME at URL: ...") is not one of them."""
    return str(exc).startswith(("adapter endpoint ", "adapter at "))


async def _unreachable(config: RunConfig, started: float) -> HTTPException:
    """The one answer for an endpoint that cannot be used, given no sooner than the connect
    timeout after the request began: a refused port and a filtered one look the same."""
    remaining = config.connect_timeout_s - (time.monotonic() - started)
    if remaining > 0:
        await asyncio.sleep(remaining)
    urls = ", ".join(endpoint.url for endpoint in config.endpoints)
    return HTTPException(422, f"{UNREACHABLE}: {urls}")

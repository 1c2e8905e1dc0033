"""How one execution of a run ends: its RunSummary, the run's final status, or the stop it
became (RunStopped) with the run's status set as the stop leaves it.

The run ends `finished`, or `failed` when every one of its sessions failed; `RunSummary.
exit_code` is what `streameval run` exits with (0 all finished, 1 some failed, 3 all failed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass, field

from streameval.core.run.endpoint_health import EndpointsGone
from streameval.core.run.errors import RunStopped, RunTakenOver
from streameval.core.run.exit_codes import EXIT_ALL_FAILED, EXIT_FINISHED, EXIT_SOME_FAILED
from streameval.core.run.lease_keeping import RunLease
from streameval.core.run.worker import finish_run_if_done
from streameval.core.session.driver import SessionOutcome
from streameval.core.store.models import RunStatus
from streameval.core.store.run_lease import StoreFileGone
from streameval.core.store.store import Store, StoreError, StoreLost

_NOT_MARKED = "not marked (the store takes no writes)"


@dataclass
class RunSummary:
    """One execution of a run. `finished`/`failed` count the sessions run this time, `kept`
    those left as they were, `retried` the failed ones redone; `status` and `failed_total`
    describe the whole run afterwards (kept sessions included)."""

    run_id: str
    total: int
    finished: int = 0
    failed: int = 0
    kept: int = 0
    retried: int = 0
    status: RunStatus = "finished"
    failed_total: int = 0
    failures: list[SessionOutcome] = field(default_factory=list)
    # The sessions that waited for their video's decode (WorkerSummary.decode_report).
    decode: dict[str, object] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.failed_total == 0:
            return EXIT_FINISHED
        return EXIT_ALL_FAILED if self.status == "failed" else EXIT_SOME_FAILED


def close_summary(store: Store, summary: RunSummary) -> None:
    """The run's status and failures afterwards, from all of its sessions, those kept from
    before included (still `running` only while workers elsewhere hold some of them)."""
    summary.status = finish_run_if_done(store, summary.run_id) or "running"
    summary.failed_total = sum(s.status == "failed" for s in store.sessions(summary.run_id))


async def await_run_work(store: Store, lease: RunLease, work: Awaitable[None]) -> None:
    """Await the run's work. Every endpoint gone leaves the run `interrupted` and a store
    failure `failed` (where the store still takes that), each as RunStopped; a takeover
    leaves the run to the other Core; any other stop leaves it `interrupted`."""
    run_id = lease.run_id
    try:
        await work
    except EndpointsGone as exc:
        store.set_run_status(run_id, "interrupted")
        left = sum(s.status == "pending" for s in store.sessions(run_id))
        raise RunStopped(
            f"run {run_id} stopped: {exc}; it is interrupted with {left} sessions not "
            f"run: resume it with `streameval run --resume {run_id}` once an adapter is back",
            run_id,
        ) from None
    except RunTakenOver:
        raise  # the run is the other Core's now: its status is not ours to set
    except StoreError as exc:
        marked = _mark_failed(lease, exc)
        raise RunStopped(
            f"run {run_id} stopped: the store failed: {exc}; the run is {marked}", run_id
        ) from None
    except BaseException:
        with contextlib.suppress(StoreError):
            store.set_run_status(run_id, "interrupted")
        raise


def _mark_failed(lease: RunLease, exc: StoreError) -> str:
    """Mark the run `failed` after the store failed, if it still can; what became of it."""
    if isinstance(exc, StoreFileGone | StoreLost) or getattr(exc, "lost", False):
        return _NOT_MARKED  # writing to the unlinked file would only pretend to mark it
    try:
        if not lease.renew():
            return "left to the Core that took it over"
        lease.store.set_run_status(lease.run_id, "failed")
    except StoreError:
        return _NOT_MARKED
    return "marked failed"

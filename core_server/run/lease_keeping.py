"""The run's lease (store/run_lease.py): an executor owns its run while it works on it.

A run another live Core owns is refused (RunOwned); one whose owner died is taken over.
While the sessions run, the lease is renewed every third of its length and the SQLite store
file is checked every STORE_CHECK_S: a lost lease (another Core took the run over) or a
vanished store stops the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Coroutine

from streameval.core.run.errors import RunTakenOver
from streameval.core.store.queue import WorkerIdentity
from streameval.core.store.run_lease import StoreFile, acquire_run, release_run, renew_run
from streameval.core.store.store import Store, StoreError

# How often a running Core checks that its SQLite store file is still the one it opened.
STORE_CHECK_S = 1.0


class RunLease:
    """One executor's lease on one run, and the watch that keeps it while work runs."""

    def __init__(self, store: Store, run_id: str, identity: WorkerIdentity, lease_s: float) -> None:
        self.store = store
        self.run_id = run_id
        self.identity = identity
        self.lease_s = lease_s
        self._store_file: StoreFile | None = None

    async def acquire(self) -> None:
        """Own the run (RunOwned while another live Core does), through store blinks."""
        acquire = functools.partial(
            acquire_run, self.store, self.run_id, self.identity, self.lease_s
        )
        await asyncio.to_thread(self.store.retrying, acquire)

    async def release(self) -> None:
        """Give the run up; a store that takes no writes lets the lease expire instead."""
        with contextlib.suppress(StoreError):
            await asyncio.to_thread(release_run, self.store, self.run_id, self.identity)

    def renew(self) -> bool:
        """Push the lease forward; False when another Core took the run over."""
        return renew_run(self.store, self.run_id, self.identity, self.lease_s)

    async def watched(self, work_to_do: Coroutine[None, None, None]) -> None:
        """Do the work while renewing the run's lease and checking the store file; a lost
        lease or a vanished store stops the work."""
        work = asyncio.create_task(work_to_do, name="streameval-run")
        watch = asyncio.create_task(self._watch(), name="streameval-run-watch")
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            watch.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)
            raise
        if not work.done():  # the watch found a problem: stop the sessions, report it
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            watch.result()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        work.result()
        self._check_store_file()  # a store deleted in the last second loses the run too

    async def _watch(self) -> None:
        self._store_file = StoreFile.of(self.store)
        renew_every = self.lease_s / 3
        next_renew = time.monotonic() + renew_every
        while True:
            await asyncio.sleep(min(STORE_CHECK_S, renew_every))
            self._check_store_file()
            if time.monotonic() < next_renew:
                continue
            next_renew = time.monotonic() + renew_every
            try:
                held = await asyncio.to_thread(self.renew)
            except StoreError:
                continue  # a store that blinked; the writer reports one that stays down
            if not held:
                raise RunTakenOver(
                    f"run {self.run_id} stopped here: another Core took it over (this Core "
                    f"stalled past its {self.lease_s:g}s lease)"
                )

    def _check_store_file(self) -> None:
        check_present = getattr(self.store, "check_present", None)
        if check_present is not None:  # the store checks its own file (StoreLost)
            check_present()
            return
        if self._store_file is not None:
            self._store_file.check()

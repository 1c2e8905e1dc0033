"""Decoding ahead: while a worker's sessions stream, the frames of the next sessions the
queue would hand out (`SessionQueue.upcoming`) are decoded in the background, one video at a
time, so that after its first video no session of the worker waits for a decode.

Best effort: a session whose video was not decoded ahead (other workers took the sessions
looked at, the store blinked) decodes it itself when it starts, as without decoding ahead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Protocol

from streameval.core.config import EndpointConfig
from streameval.core.store.store import SessionInfo

logger = logging.getLogger(__name__)
# Sessions ahead by default: twice those in flight (the next ones of every slot, and the
# ones after while others claim theirs), at least this many: workers sharing a cache look at
# the same next sessions of the fleet and split them (a video one decodes, the others skip),
# so a few would leave the fleet's later claims undecoded (bench_fleet: 145 of 992 sessions
# waited for a decode with 4, 4 with 16).
LOOK_AHEAD_MIN = 16


def look_ahead_for(given: int | None, endpoints: Sequence[EndpointConfig]) -> int:
    """Sessions a worker decodes ahead: `given`, else twice its sessions in flight (at
    least LOOK_AHEAD_MIN)."""
    if given is not None:
        return given
    return max(LOOK_AHEAD_MIN, 2 * sum(endpoint.concurrency for endpoint in endpoints))


class AheadRunner(Protocol):
    async def prepare_ahead(self, sessions: list[SessionInfo]) -> None: ...


class DecodingAhead:
    """Once each claimed session's frames are ready (`wanted`), one background pass: the
    next `look_ahead` sessions of the run the queue would hand out, their frames prepared by
    the run's runner. Sessions ready during a pass ask for one more pass, not one each."""

    def __init__(
        self,
        look_ahead: int,
        upcoming: Callable[[str, int], Awaitable[list[SessionInfo]]],
        runner_for: Callable[[str], Awaitable[AheadRunner]],
    ) -> None:
        self.look_ahead = look_ahead
        self._upcoming = upcoming
        self._runner_for = runner_for
        self._runs: dict[str, None] = {}  # runs to look ahead in, in the order asked
        self._task: asyncio.Task[None] | None = None

    def wanted(self, run_id: str) -> None:
        """A claimed session of `run_id` has its frames: look ahead in it (again)."""
        if self.look_ahead <= 0:
            return
        self._runs[run_id] = None
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._passes(), name="streameval-decode-ahead")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _passes(self) -> None:
        while self._runs:
            run_id = next(iter(self._runs))
            del self._runs[run_id]
            try:
                sessions = await self._upcoming(run_id, self.look_ahead)
                if sessions:
                    await (await self._runner_for(run_id)).prepare_ahead(sessions)
            except Exception as exc:  # the sessions decode their videos themselves
                logger.warning("cannot decode ahead in run %s: %s", run_id, exc)


class OwnDecodes:
    """The sessions of this process waiting for their own video's decode. Decoding ahead
    waits while there is one: a session ready to stream comes before the sessions after it
    (a worker's first video, or a video decoding ahead did not reach in time)."""

    def __init__(self) -> None:
        self._waiting = 0
        self._none = asyncio.Event()
        self._none.set()

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        """A session waits for its frames while the block runs."""
        self._waiting += 1
        self._none.clear()
        try:
            yield
        finally:
            self._waiting -= 1
            if not self._waiting:
                self._none.set()

    async def none_left(self) -> None:
        await self._none.wait()

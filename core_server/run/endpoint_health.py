"""Endpoints have health: a replica that cannot take sessions leaves the rotation.

A session that fails before its first task reached the adapter for an infrastructure reason
(connection refused, the adapter gone or crashed before its hello) says nothing about the
model; it says the replica is unusable. The worker then takes that endpoint out of rotation:
its slots stop claiming sessions and one of them re-probes the endpoint's `/healthz` with
exponential backoff (PROBE_FIRST_S doubling up to PROBE_MAX_S) until it answers 200 again.
The session itself goes back to the queue as a new attempt (at most INFRA_RETRIES times per
session and Core; then it fails as it did before), where the healthy replicas take it.
When every endpoint of the worker has been out of rotation for `give_up_s` (default
ALL_DOWN_GIVE_UP_S) the worker stops with `EndpointsGone` instead of burning its queue: the
run is `interrupted`, its unstarted sessions stay pending, and `--resume` continues it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

import httpx

from streameval.core.errors import CoreError
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S
from streameval.core.session.readiness import Notice, http_base

PROBE_FIRST_S = 0.5  # the first re-probe of an endpoint taken out of rotation
PROBE_MAX_S = 10.0  # the backoff between re-probes stops growing here
PROBE_TIMEOUT_S = 5.0  # one /healthz probe, all of it (connect, headers, body)
INFRA_RETRIES = 3  # new attempts for a session whose endpoint failed before its first task


class EndpointsGone(CoreError):
    """Every endpoint of the run has been out of rotation for the give-up time."""


class EndpointHealth:
    """One endpoint's place in the rotation and its re-probe schedule."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.down_since: float | None = None
        self.reason = ""
        self._delay = PROBE_FIRST_S
        self._next_probe = 0.0
        self._probing = asyncio.Lock()
        # Checks an endpoint never seen up must pass before it first joins the rotation
        # (its /info, the run's profile and adapter identity); None once passed.
        self.admission: Callable[[], Awaitable[None]] | None = None
        self.refusal: str | None = None  # why the admission failed, until it is said

    @property
    def up(self) -> bool:
        return self.down_since is None

    def mark_down(self, reason: str) -> bool:
        """Take the endpoint out of rotation; True when it was in rotation until now."""
        self.reason = reason
        if self.down_since is not None:
            return False
        self.down_since = time.monotonic()
        self._delay = PROBE_FIRST_S
        self._next_probe = self.down_since + self._delay
        return True

    def mark_up(self) -> None:
        self.down_since = None
        self.reason = ""

    async def probe(self) -> bool:
        """Wait for the next probe time, ask /healthz once; back off when it is not 200.
        True when this probe brought the endpoint back."""
        async with self._probing:
            if self.up:  # another slot's probe brought it back meanwhile
                return False
            await asyncio.sleep(max(self._next_probe - time.monotonic(), 0.0))
            if await _healthy(self.url) and await self._admitted():
                self.mark_up()
                return True
            self._delay = min(self._delay * 2, PROBE_MAX_S)
            self._next_probe = time.monotonic() + self._delay
            return False

    async def _admitted(self) -> bool:
        if self.admission is None:
            return True
        try:
            await self.admission()
        except CoreError as exc:  # an unusable /info, another adapter, a profile conflict
            self.reason = self.refusal = str(exc)
            return False
        self.admission = None
        return True


async def _healthy(url: str) -> bool:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
                response = await client.get(f"{http_base(url)}/healthz")
    except (httpx.HTTPError, OSError, TimeoutError):
        return False
    return response.status_code == 200


class EndpointPool:
    """The health of a worker's endpoints, shared by their slots."""

    def __init__(
        self,
        urls: Iterable[str],
        *,
        give_up_s: float = ALL_DOWN_GIVE_UP_S,
        notice: Notice | None = None,
    ) -> None:
        self._health = {url: EndpointHealth(url) for url in urls}
        self.give_up_s = give_up_s
        self.notice = notice

    def mark_down(
        self, url: str, reason: str, admission: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Take `url` out of rotation; `admission` must pass before it first comes back."""
        if admission is not None:
            self._health[url].admission = admission
        if self._health[url].mark_down(reason) and self.notice is not None:
            self.notice(f"adapter at {url} is out of rotation: {reason}")

    def up(self, url: str) -> bool:
        return self._health[url].up

    async def reprobe(self, url: str) -> None:
        """Probe an endpoint out of rotation once, at its backoff time (it may come back);
        raise EndpointsGone when every endpoint has been out of rotation for `give_up_s`."""
        self._check_all_gone()
        health = self._health[url]
        back = await health.probe()
        if self.notice is None:
            return
        if back:
            self.notice(f"adapter at {url} is back in rotation")
        elif health.refusal is not None:
            self.notice(f"adapter at {url} answers but stays out of rotation: {health.refusal}")
            health.refusal = None

    def _check_all_gone(self) -> None:
        healths = list(self._health.values())
        if any(h.up for h in healths):
            return
        latest = max(h.down_since for h in healths if h.down_since is not None)
        if time.monotonic() - latest < self.give_up_s:
            return
        reasons = "; ".join(f"{h.url}: {h.reason}" for h in healths)
        raise EndpointsGone(
            f"every adapter endpoint has been unreachable for {self.give_up_s:g}s ({reasons})"
        )

"""Waiting for an adapter endpoint to be ready before its sessions start.

An adapter server answers `GET /healthz` with 200 `ok` once it takes sessions, and with 503
`loading` while its model loads (or 503 `failed: REASON` when loading failed or the model
became unusable); a session's WebSocket upgrade is refused with 503 `not_ready: ...` until
then. The Core polls `/healthz` until 200, up to the run's `adapter_ready_timeout_s`, with a
progress line; an endpoint that is ready at once costs one request and no delay, and one
without `/healthz` (404) counts as ready.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

import httpx

from streameval.core.errors import CoreError

Notice = Callable[[str], None]

POLL_S = 0.5
NOTICE_EVERY_S = 30.0


class AdapterNotReady(CoreError):
    """An endpoint that reports `failed` (`failed` True), or did not become ready in time."""

    def __init__(self, message: str, *, failed: bool) -> None:
        super().__init__(message)
        self.failed = failed


def stderr_notice(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def http_base(endpoint_url: str) -> str:
    """`ws://host:port/ws` -> `http://host:port` (wss -> https)."""
    base = "http" + endpoint_url[2:] if endpoint_url.startswith("ws") else endpoint_url
    return base.removesuffix("/").removesuffix("/ws")


async def wait_until_ready(
    endpoint_url: str,
    timeout_s: float,
    *,
    client: httpx.AsyncClient | None = None,
    notice: Notice | None = stderr_notice,
    poll_s: float = POLL_S,
) -> None:
    """Return once the endpoint's `/healthz` answers 200 (or 404: no readiness to wait for).

    Raises `AdapterNotReady` when it reports `failed` or stays not ready for `timeout_s`;
    an `httpx.HTTPError` when the endpoint cannot be reached at all."""
    if client is None:
        async with httpx.AsyncClient(timeout=10.0) as own:
            await wait_until_ready(
                endpoint_url, timeout_s, client=own, notice=notice, poll_s=poll_s
            )
        return
    url = f"{http_base(endpoint_url)}/healthz"
    started = time.monotonic()
    announced: float | None = None
    while True:
        response = await client.get(url)
        if response.status_code in (200, 404):
            if announced is not None and notice is not None:
                waited = time.monotonic() - started
                notice(f"adapter at {endpoint_url} is ready (waited {waited:.0f}s)")
            return
        state = response.text.strip().splitlines()[0] if response.text.strip() else ""
        state = state or f"HTTP {response.status_code}"
        if state.startswith("failed"):
            reason = state.removeprefix("failed").lstrip(": ") or "no reason given"
            raise AdapterNotReady(f"adapter at {endpoint_url} failed: {reason}", failed=True)
        waited = time.monotonic() - started
        if waited >= timeout_s:
            raise AdapterNotReady(
                f"adapter at {endpoint_url} was not ready within {timeout_s:g}s (/healthz: "
                f"{state}); give it longer with --adapter-ready-timeout",
                failed=False,
            )
        if notice is not None and (announced is None or waited - announced >= NOTICE_EVERY_S):
            announced = waited
            notice(
                f"waiting for adapter at {endpoint_url}: {state} ({waited:.0f}s of {timeout_s:g}s)"
            )
        await asyncio.sleep(min(poll_s, max(timeout_s - waited, 0.0)))

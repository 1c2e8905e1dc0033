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
# One /healthz request must be answered whole within this time and this many bytes (the
# client's timeout is per read: a reply trickling a byte at a time would never end).
HEALTHZ_TIMEOUT_S = 10.0
HEALTHZ_MAX_BYTES = 64 * 1024


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
        status, text = await _get_healthz(client, url)
        if status in (200, 404):
            if announced is not None and notice is not None:
                waited = time.monotonic() - started
                notice(f"adapter at {endpoint_url} is ready (waited {waited:.0f}s)")
            return
        state = text.strip().splitlines()[0] if text.strip() else ""
        state = state or f"HTTP {status}"
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


async def _get_healthz(client: httpx.AsyncClient, url: str) -> tuple[int, str]:
    """(status, text) of one /healthz request, bounded in time and size (httpx.HTTPError
    when the endpoint cannot answer within them)."""
    try:
        async with asyncio.timeout(HEALTHZ_TIMEOUT_S):
            async with client.stream("GET", url) as response:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > HEALTHZ_MAX_BYTES:
                        raise httpx.DecodingError(
                            f"{url} answered more than {HEALTHZ_MAX_BYTES} bytes"
                        )
                return response.status_code, body.decode("utf-8", "replace")
    except TimeoutError:
        raise httpx.ReadTimeout(
            f"{url} did not answer completely within {HEALTHZ_TIMEOUT_S:g}s"
        ) from None

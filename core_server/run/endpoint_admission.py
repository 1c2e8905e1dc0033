"""Which of a run's endpoints may serve it: ready, their /info usable and not in conflict
with the protocol profile, and serving an adapter identity the run has used.

An endpoint unusable at start (unreachable, not ready, a bad /info) is left out of rotation
(`EndpointAdmission.left_out`) as long as another one is usable, and joins once the same
checks pass (`admit_late`). A resume refuses endpoints that serve another adapter identity
than the run used, unless the change is allowed; every (identity, endpoint) pair a run used
is listed in `runs.conditions["adapters"]`.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence

import httpx

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.config import PROTOCOL_PROFILES, EndpointConfig, RunConfig, audio_refusal
from streameval.core.run.adapter_identity import (
    adapter_identity,
    identity_differences,
    identity_label,
)
from streameval.core.run.endpoint_health import EndpointPool
from streameval.core.run.errors import EndpointUnusable, RunError
from streameval.core.session.readiness import (
    AdapterNotReady,
    Notice,
    stderr_notice,
    wait_until_ready,
)
from streameval.core.store.store import Store
from streameval.protocol import AdapterConditions

# The adapter's /info must arrive whole within this time and be at most this long.
INFO_TIMEOUT_S = 30.0
INFO_MAX_BYTES = 1024 * 1024


async def check_endpoint(
    endpoint: EndpointConfig,
    config: RunConfig,
    has_proactive: bool,
    notice: Notice | None = stderr_notice,
    info_timeout_s: float = INFO_TIMEOUT_S,
) -> dict:
    """Wait until the endpoint is ready (a loading model: /healthz 503), ask its /info and
    refuse a run whose conditions contradict the profile."""
    try:
        # Certificates are loaded only for a TLS endpoint: loading them costs each worker
        # joining a run tens of milliseconds of CPU, for nothing on a ws:// endpoint.
        tls = endpoint.url.startswith("wss:")
        async with httpx.AsyncClient(timeout=config.connect_timeout_s, verify=tls) as client:
            await wait_until_ready(
                endpoint.url, config.adapter_ready_timeout_s, client=client, notice=notice
            )
            info = await fetch_info(client, endpoint, info_timeout_s)
    except AdapterNotReady as exc:
        raise EndpointUnusable(str(exc)) from None
    except (httpx.HTTPError, ValueError) as exc:
        raise EndpointUnusable(f"adapter endpoint {endpoint.url} is not reachable: {exc}") from None
    try:
        conditions = AdapterConditions.model_validate(info["conditions"])
    except (KeyError, TypeError, ValueError) as exc:
        problem = "has no conditions" if isinstance(exc, KeyError) else "has invalid conditions"
        raise EndpointUnusable(f"adapter endpoint {endpoint.url}: its /info {problem}") from None
    conflict = PROTOCOL_PROFILES[config.profile].conflicts(conditions, has_proactive)
    if conflict is None and config.streams_audio and info.get("audio") is not True:
        conflict = audio_refusal(info.get("adapter"))
    if conflict:
        raise RunError(f"adapter {info.get('adapter')} at {endpoint.url}: {conflict}")
    return info


async def fetch_info(
    client: httpx.AsyncClient, endpoint: EndpointConfig, timeout_s: float = INFO_TIMEOUT_S
) -> dict:
    """The endpoint's /info as a JSON object, read within `timeout_s` in all (the client's
    timeout is per read: a reply trickling a byte at a time would never end) and at most
    INFO_MAX_BYTES long (a huge reply must not take the Core's memory)."""
    url = f"{endpoint.http_base}/info"
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url) as response:
                response.raise_for_status()
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > INFO_MAX_BYTES:
                    raise EndpointUnusable(
                        _info_too_big(endpoint, f"{int(declared)} bytes declared")
                    )
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > INFO_MAX_BYTES:
                        raise EndpointUnusable(_info_too_big(endpoint, "more"))
    except TimeoutError:
        raise EndpointUnusable(
            f"adapter endpoint {endpoint.url}: /info did not answer completely within "
            f"{timeout_s:g}s"
        ) from None
    try:
        info = json.loads(body)
    except ValueError:
        raise EndpointUnusable(f"adapter endpoint {endpoint.url}: /info is not JSON") from None
    if not isinstance(info, dict):
        raise EndpointUnusable(f"adapter endpoint {endpoint.url}: /info is not a JSON object")
    return info


def _info_too_big(endpoint: EndpointConfig, size: str) -> str:
    return (
        f"adapter endpoint {endpoint.url}: /info is larger than its limit of "
        f"{INFO_MAX_BYTES} bytes ({size})"
    )


def _has_proactive(records: Sequence[QARecord | ProactiveRecord]) -> bool:
    return any(r.task == "proactive" for r in records)


class EndpointAdmission:
    """The checks a run's endpoints pass, and what they found: the endpoints left out of
    rotation at start and whether the run may change its adapter identity."""

    def __init__(self, config: RunConfig, store: Store) -> None:
        self.config = config
        self.store = store
        # Endpoints the last check found unusable (url -> why): the run starts without them.
        self.left_out: dict[str, str] = {}
        # Each admitted endpoint's /info (url -> info): its sessions' hellos must match it.
        self.infos: dict[str, dict] = {}
        self.allow_adapter_change = False

    async def check_endpoints(
        self, records: Sequence[QARecord | ProactiveRecord], notice: Notice | None
    ) -> list[dict | None]:
        """Each endpoint's /info, None for one that cannot be used now (unreachable, not
        ready, a bad /info): the run starts without it, out of rotation and re-probed
        (`left_out`), as long as one endpoint is usable; with none, the first one's error
        refuses the run. A profile conflict refuses it whatever the others say. A run made
        with no endpoints (`run --detach`, workers bring theirs) checks nothing here."""
        has_proactive = _has_proactive(records)
        checks = [
            check_endpoint(e, self.config, has_proactive, notice) for e in self.config.endpoints
        ]
        results = await asyncio.gather(*checks, return_exceptions=True)
        for result in results:  # a conflict, a bug, a cancellation: not an unusable replica
            if isinstance(result, BaseException) and not isinstance(result, EndpointUnusable):
                raise result
        unusable = [r for r in results if isinstance(r, EndpointUnusable)]
        if unusable and len(unusable) == len(results):
            raise unusable[0]
        self.left_out = {
            endpoint.url: str(result)
            for endpoint, result in zip(self.config.endpoints, results, strict=True)
            if isinstance(result, EndpointUnusable)
        }
        infos = [None if isinstance(r, EndpointUnusable) else r for r in results]
        self._admitted(infos)
        return infos

    def keep_left_out(
        self, health: EndpointPool, run_id: str, records: Sequence[QARecord | ProactiveRecord]
    ) -> None:
        """Endpoints unusable at start are out of rotation from the first claim, re-probed
        with backoff like a replica lost mid-run (the pool's notice names it and why); each
        joins only once its /info, profile and adapter identity pass."""
        has_proactive = _has_proactive(records)
        for endpoint in self.config.endpoints:
            if endpoint.url in self.left_out:
                admission = functools.partial(self.admit_late, run_id, endpoint, has_proactive)
                health.mark_down(endpoint.url, self.left_out[endpoint.url], admission)

    async def admit_late(self, run_id: str, endpoint: EndpointConfig, has_proactive: bool) -> None:
        """The checks an endpoint left out at start passes before it first joins: the same
        as at start (its /info, the profile, the adapter identity the run uses)."""
        info = await check_endpoint(endpoint, self.config, has_proactive, None)
        infos = [info if e.url == endpoint.url else None for e in self.config.endpoints]
        await asyncio.to_thread(self.check_identities, run_id, infos, self.allow_adapter_change)
        self._admitted(infos)

    def _admitted(self, infos: list[dict | None]) -> None:
        for endpoint, info in zip(self.config.endpoints, infos, strict=True):
            if info is not None:
                self.infos[endpoint.url] = info

    def check_identities(self, run_id: str, infos: list[dict | None], allow_change: bool) -> None:
        """Refuse endpoints whose adapter identity the run has not used (unless allowed);
        record every (identity, endpoint) pair the run now uses in its conditions. The check
        and the record are one step of the store (Store.change_run_conditions): of two Cores
        binding different adapters to a run at once, the second is compared with the first."""
        self.allow_adapter_change = allow_change
        bind = functools.partial(self._bind, run_id, infos, allow_change)
        self.store.change_run_conditions(run_id, bind)

    def _bind(
        self, run_id: str, infos: list[dict | None], allow_change: bool, conditions: dict
    ) -> dict | None:
        """The run's conditions with these endpoints' identities added; None when it lists
        them all already. RunError for an identity the run has not used."""
        used: list[dict] = list(conditions.get("adapters") or [])
        known = [adapter_identity(info) for info in used]
        added: list[dict] = []
        for endpoint, info in zip(self.config.endpoints, infos, strict=True):
            if info is None:  # left out of rotation at start: nothing to compare yet
                continue
            identity = adapter_identity(info)
            if used and identity not in known and not allow_change:
                changes = identity_differences(used[-1], info)
                raise RunError(
                    f"run {run_id} used adapter {identity_label(used[-1])} but {endpoint.url} "
                    f"serves {identity_label(info)} ({', '.join(changes)}); pass "
                    "--allow-adapter-change to resume with a different adapter on purpose"
                )
            entry = {**info, "endpoint": endpoint.url}
            pairs = [(adapter_identity(u), u.get("endpoint")) for u in used + added]
            if (identity, endpoint.url) not in pairs:
                added.append(entry)
        if not added:
            return None
        return {**conditions, "adapters": used + added}

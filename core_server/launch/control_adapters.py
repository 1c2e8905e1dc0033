"""The control API's adapter registry: the /adapters routes, and the checks an adapter
endpoint passes when it is registered and when a run uses it (a well-formed URL on a host
that `STREAMEVAL_ADAPTER_HOSTS` allows). Registered endpoints live in the store (table
`adapter_endpoints`), so they outlive a restart.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field, ValidationError

from streameval.core.config import (
    MAX_ENDPOINT_CONCURRENCY,
    EndpointConfig,
    adapter_host_patterns,
    host_allowed,
)
from streameval.core.store.store import Store, StoreError
from streameval.web_readiness import STORE_UNAVAILABLE

log = logging.getLogger(__name__)


class AdapterRegistration(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str
    concurrency: int = Field(default=4, ge=1, le=MAX_ENDPOINT_CONCURRENCY)


def adapters_router(store: Store) -> APIRouter:
    """POST /adapters registers an endpoint by name, GET /adapters lists them."""
    router = APIRouter(tags=["adapters"])

    @router.post("/adapters", status_code=201, response_model=AdapterRegistration)
    def register_adapter(registration: AdapterRegistration) -> AdapterRegistration:
        """Register (or replace) an adapter endpoint by name; its host must be allowed."""
        endpoint = allowed_endpoint(registration.url, registration.concurrency)
        try:
            store.register_adapter_endpoint(registration.name, endpoint.url, endpoint.concurrency)
        except StoreError as exc:
            raise store_unavailable(exc) from None
        return registration

    @router.get("/adapters", response_model=list[AdapterRegistration])
    def list_adapters() -> list[AdapterRegistration]:
        """The registered adapter endpoints."""
        return [
            AdapterRegistration(name=name, url=e.url, concurrency=e.concurrency)
            for name, e in registered(store).items()
        ]

    return router


def allowed_endpoint(url: str, concurrency: int) -> EndpointConfig:
    """The endpoint, if its URL is well formed and its host is on the allow-list; 422."""
    try:
        endpoint = EndpointConfig(url=url, concurrency=concurrency)
    except ValidationError as exc:
        raise HTTPException(422, first_error(exc)) from None
    patterns = adapter_host_patterns()
    if not host_allowed(endpoint.url, patterns):
        raise HTTPException(
            422,
            f"adapter endpoint {endpoint.url} is not on the allowed hosts "
            f"({', '.join(patterns)}); the Core's operator allows more in "
            "STREAMEVAL_ADAPTER_HOSTS",
        )
    return endpoint


def first_error(exc: ValidationError) -> str:
    """The first problem of a validation error, as one line for a 422: `field: message`."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def registered(store: Store) -> dict[str, EndpointConfig]:
    """The registered endpoints by name, read from the store on every request so a restarted
    Core (or another worker on the same store) sees the same ones."""
    try:
        stored = store.adapter_endpoints()
    except StoreError as exc:
        raise store_unavailable(exc) from None
    found: dict[str, EndpointConfig] = {}
    for row in stored:
        try:
            found[row.name] = EndpointConfig(url=row.url, concurrency=row.concurrency)
        except ValueError:
            # Validated when registered, so only a row written around the API (or before
            # the URL rules tightened) gets here; a run on it is refused when confined
            # (core_server/launch/control_run_config.py).
            raise HTTPException(
                409, f"stored adapter endpoint {row.name!r} is invalid: re-register it"
            ) from None
    return found


def store_unavailable(exc: StoreError) -> HTTPException:
    """The 503 of a store failure: its text names the store (a SQLite file's path, a
    database host), which is the operator's to read, in the server's log."""
    log.error("store failure: %s", exc)
    return HTTPException(503, STORE_UNAVAILABLE)

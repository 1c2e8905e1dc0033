"""The Core's control API: register adapter endpoints, start runs, follow their status.

Every route needs `Authorization: Bearer <token>`; the server binds to loopback unless told
otherwise, because starting a run makes the Core open connections on the user's behalf.
Registered endpoints live in the store (table `adapter_endpoints`), so they outlive a restart.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections import Counter
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.errors import CoreError
from streameval.core.runner import RunExecutor
from streameval.core.store.store import Store, StoreError

TOKEN_ENV = "STREAMEVAL_API_TOKEN"
_BEARER = HTTPBearer(auto_error=False)


def resolve_token() -> tuple[str, bool]:
    """The configured token, or a fresh random one (and whether it was generated)."""
    token = os.environ.get(TOKEN_ENV)
    return (token, False) if token else (secrets.token_urlsafe(24), True)


class AdapterRegistration(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str
    concurrency: int = Field(default=4, ge=1, le=1024)


class RunRequest(BaseModel):
    """A RunConfig whose endpoints may also name registered adapters."""

    config: RunConfig | None = None
    adapters: list[str] = Field(default_factory=list, description="registered adapter names")
    overrides: dict = Field(default_factory=dict, description="RunConfig fields, with adapters")


class RunStatus(BaseModel):
    run_id: str
    status: str
    sessions: dict[str, int]
    config_hash: str


def create_app(store_url: str, token: str) -> FastAPI:
    store = Store(store_url)
    tasks: dict[str, asyncio.Task] = {}

    def authorize(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        if credentials is None or not secrets.compare_digest(credentials.credentials, token):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        store.close()

    app = FastAPI(
        title="streameval control API",
        version="1",
        dependencies=[Depends(authorize)],
        lifespan=lifespan,
    )

    @app.post("/adapters", status_code=201)
    def register_adapter(registration: AdapterRegistration) -> AdapterRegistration:
        try:
            endpoint = EndpointConfig(url=registration.url, concurrency=registration.concurrency)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
        try:
            store.register_adapter_endpoint(registration.name, endpoint.url, endpoint.concurrency)
        except StoreError as exc:
            raise _unavailable(exc) from None
        return registration

    @app.get("/adapters")
    def list_adapters() -> list[AdapterRegistration]:
        return [
            AdapterRegistration(name=name, url=e.url, concurrency=e.concurrency)
            for name, e in _registered(store).items()
        ]

    @app.post("/runs", status_code=202)
    async def start_run(request: RunRequest) -> RunStatus:
        config = _config_for(request, store)
        executor = RunExecutor(config, store)
        try:
            run_id = await executor.prepare()
        except CoreError as exc:
            raise HTTPException(422, str(exc)) from None
        tasks[run_id] = asyncio.create_task(executor.execute(run_id))
        return _status(store, run_id)

    @app.get("/runs/{run_id}")
    def run_status(run_id: str) -> RunStatus:
        try:
            return _status(store, run_id)
        except StoreError as exc:
            raise HTTPException(404, str(exc)) from None

    return app


def _config_for(request: RunRequest, store: Store) -> RunConfig:
    registry = _registered(store)
    unknown = [name for name in request.adapters if name not in registry]
    if unknown:
        raise HTTPException(422, f"unregistered adapters: {unknown}")
    endpoints = [registry[name] for name in request.adapters]
    if request.config is not None:
        config = request.config
        if endpoints:
            config = config.model_copy(update={"endpoints": endpoints})
        return config
    if not endpoints:
        raise HTTPException(422, "name registered adapters or give a full config")
    try:
        return RunConfig(endpoints=endpoints, **{"benchmark": "synthetic", **request.overrides})
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None


def _registered(store: Store) -> dict[str, EndpointConfig]:
    """The registered endpoints by name, read from the store on every request so a restarted
    Core (or another worker on the same store) sees the same ones."""
    try:
        stored = store.adapter_endpoints()
    except StoreError as exc:
        raise _unavailable(exc) from None
    registered: dict[str, EndpointConfig] = {}
    for row in stored:
        try:
            registered[row.name] = EndpointConfig(url=row.url, concurrency=row.concurrency)
        except ValueError:
            # Validated when registered, so only a row written around the API gets here;
            # pydantic's multi-line message would not fit one line of `detail`.
            raise HTTPException(
                500, f"stored adapter endpoint {row.name!r} is invalid: re-register it"
            ) from None
    return registered


def _unavailable(exc: StoreError) -> HTTPException:
    return HTTPException(503, f"adapter registry unavailable: {exc}")


def _status(store: Store, run_id: str) -> RunStatus:
    run = store.get_run(run_id)
    counts = Counter(session.status for session in store.sessions(run_id))
    return RunStatus(
        run_id=run_id, status=run.status, sessions=dict(counts), config_hash=run.config_hash
    )

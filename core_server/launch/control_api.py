"""The Core's control API: register adapter endpoints, start runs, follow their status.

Every route but `/healthz` needs `Authorization: Bearer <token>`; the server binds to
loopback unless told otherwise, because starting a run makes the Core open connections on
the user's behalf. Registered endpoints live in the store (table `adapter_endpoints`), so
they outlive a restart.

Least privilege (docs/security.md): a client holding the token can make the Core connect to
adapter endpoints and read benchmark files, so it can do exactly that and no more.
- Adapter endpoints must be plain `ws[s]://host[:port]/ws` URLs on a host allowed by
  `STREAMEVAL_ADAPTER_HOSTS` (default: loopback), checked when registered and when used.
- A run started here cannot choose paths: no `cache_dir` (the Core's own is used), and its
  `benchmark` and `video_root` are `synthetic` or paths under `STREAMEVAL_DATA_ROOT`.
- An endpoint that cannot be used is reported with one message, and no sooner than the
  run's connect timeout, whatever the reason (refused, filtered, not ready, not an
  adapter): the API is not a port scanner.
- The OpenAPI schema, /docs and /redoc are not served unless `STREAMEVAL_API_DOCS=1`
  (`docs_line`, printed when the server starts, says so and how to turn them on).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import time
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, ValidationError

from streameval.api_docs import Health, add_offline_docs
from streameval.core.config import (
    MAX_ENDPOINT_CONCURRENCY,
    EndpointConfig,
    RunConfig,
    adapter_host_patterns,
    host_allowed,
)
from streameval.core.errors import CoreError
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store, StoreError

TOKEN_ENV = "STREAMEVAL_API_TOKEN"
DATA_ROOT_ENV = "STREAMEVAL_DATA_ROOT"
DOCS_ENV = "STREAMEVAL_API_DOCS"
# The token .env.example used to ship: a stack started with it is open to anyone who read it.
EXAMPLE_TOKEN = "change-me"
MIN_TOKEN_CHARS = 16
# Fields of a run that name files on the Core's machine.
PATH_FIELDS = ("benchmark", "video_root", "cache_dir")
UNREACHABLE = "adapter endpoint not reachable, not ready or not a streameval adapter"
_UNSETTLED = ("created", "running")  # run statuses that a crashed execution leaves behind
_BEARER = HTTPBearer(auto_error=False)
log = logging.getLogger("streameval.core.launch.control_api")


class TokenError(CoreError):
    """A configured token that would leave the API open (the example one, or too short)."""


def resolve_token() -> tuple[str, bool]:
    """The configured token, or a fresh random one (and whether it was generated).

    Raises TokenError, one line, for the example token or one shorter than 16 characters:
    the API refuses to start rather than serve behind a guessable token."""
    token = os.environ.get(TOKEN_ENV)
    if not token:
        return secrets.token_urlsafe(24), True
    if token == EXAMPLE_TOKEN:
        raise TokenError(
            f"{TOKEN_ENV} is the example token {EXAMPLE_TOKEN!r}: choose your own of at least "
            f"{MIN_TOKEN_CHARS} characters, or leave it unset for a random one"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise TokenError(
            f"{TOKEN_ENV} has {len(token)} characters; it needs at least {MIN_TOKEN_CHARS}"
        )
    return token, False


def docs_enabled() -> bool:
    return os.environ.get(DOCS_ENV, "") == "1"


def docs_line() -> str:
    """Where the API docs are, or how to serve them: printed when the API starts."""
    if docs_enabled():
        return "control API docs at /docs and /redoc (schema at /openapi.json)"
    return (
        f"control API docs are off (the schema maps what a token holder can do): "
        f"set {DOCS_ENV}=1 to serve /docs, /redoc and /openapi.json"
    )


class AdapterRegistration(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    url: str
    concurrency: int = Field(default=4, ge=1, le=MAX_ENDPOINT_CONCURRENCY)


class RunRequest(BaseModel):
    """A RunConfig whose endpoints may also name registered adapters."""

    config: RunConfig | None = None
    adapters: list[str] = Field(default_factory=list, description="registered adapter names")
    overrides: dict = Field(
        default_factory=dict,
        description="RunConfig fields other than endpoints and cache_dir; benchmark and "
        "video_root are 'synthetic' or paths under STREAMEVAL_DATA_ROOT",
    )


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


def create_app(store_url: str, token: str) -> FastAPI:
    store = Store(store_url)
    tasks: dict[str, asyncio.Task] = {}
    crashes: dict[str, str] = {}  # run id -> why its background execution crashed
    expected = token.encode()

    def authorize(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        # Compared as bytes: compare_digest refuses str with non-ASCII characters (a 500).
        given = None if credentials is None else credentials.credentials.encode()
        if given is None or not secrets.compare_digest(given, expected):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Once serving (after the listening line; a port that cannot be bound stays one line).
        print(docs_line(), file=sys.stderr, flush=True)
        yield
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        store.close()

    docs = docs_enabled()
    app = FastAPI(
        title="streameval control API",
        version="1",
        lifespan=lifespan,
        # The schema maps the attack surface: served only when asked for.
        openapi_url="/openapi.json" if docs else None,
        docs_url=None,  # FastAPI's own pages load from a CDN: add_offline_docs serves them
        redoc_url=None,
    )
    if docs:
        add_offline_docs(app)
    authorized = [Depends(authorize)]

    @app.get("/healthz", response_model=Health, tags=["service"])
    def healthz() -> Health:
        """Liveness for health checks, without the token; says nothing about the server."""
        return Health()

    @app.post(
        "/adapters",
        status_code=201,
        response_model=AdapterRegistration,
        dependencies=authorized,
        tags=["adapters"],
    )
    def register_adapter(registration: AdapterRegistration) -> AdapterRegistration:
        """Register (or replace) an adapter endpoint by name; its host must be allowed."""
        endpoint = _allowed_endpoint(registration.url, registration.concurrency)
        try:
            store.register_adapter_endpoint(registration.name, endpoint.url, endpoint.concurrency)
        except StoreError as exc:
            raise _unavailable(exc) from None
        return registration

    @app.get(
        "/adapters",
        response_model=list[AdapterRegistration],
        dependencies=authorized,
        tags=["adapters"],
    )
    def list_adapters() -> list[AdapterRegistration]:
        """The registered adapter endpoints."""
        return [
            AdapterRegistration(name=name, url=e.url, concurrency=e.concurrency)
            for name, e in _registered(store).items()
        ]

    @app.post(
        "/runs", status_code=202, response_model=RunStatus, dependencies=authorized, tags=["runs"]
    )
    async def start_run(request: RunRequest) -> RunStatus:
        """Start a run on registered adapters (or a full config); it runs in the background."""
        config = _config_for(request, store)
        executor = RunExecutor(config, store)
        started = time.monotonic()
        try:
            run_id = await executor.prepare()
        except CoreError as exc:
            if _is_unreachable(exc):
                raise await _unreachable(config, started) from None
            raise HTTPException(422, str(exc)) from None
        task = asyncio.create_task(executor.execute(run_id))
        task.add_done_callback(lambda done: _note_crash(store, run_id, done, crashes))
        tasks[run_id] = task
        return _status(store, run_id, crashes)

    @app.get("/runs/{run_id}", response_model=RunStatus, dependencies=authorized, tags=["runs"])
    def run_status(run_id: str) -> RunStatus:
        """A run's status, its sessions per status and why it ended with an error, if it did."""
        try:
            return _status(store, run_id, crashes)
        except StoreError:
            # StoreError's text names the store (a path or a host): not for API clients.
            raise HTTPException(404, f"unknown run id {run_id!r}") from None

    return app


def _note_crash(store: Store, run_id: str, task: asyncio.Task, crashes: dict[str, str]) -> None:
    """A background run that raised: logged, and its run marked failed with the reason (GET
    /runs/{id} shows both), instead of an exception nobody retrieves."""
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
    crashes[run_id] = reason
    log.error("run %s crashed: %s", run_id, reason, exc_info=exc)
    try:
        # A status the runner recorded on its way out (`interrupted` when every replica
        # was gone: resumable) is kept; a run left `created` or `running` failed.
        if store.get_run(run_id).status in _UNSETTLED:
            store.set_run_status(run_id, "failed")
    except StoreError as failed:
        # The store may be why it crashed: the reason is still served from memory.
        log.error("run %s: cannot record its failure: %s", run_id, failed)


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


def _allowed_endpoint(url: str, concurrency: int) -> EndpointConfig:
    """The endpoint, if its URL is well formed and its host is on the allow-list; 422."""
    try:
        endpoint = EndpointConfig(url=url, concurrency=concurrency)
    except ValidationError as exc:
        raise HTTPException(422, _first_error(exc)) from None
    patterns = adapter_host_patterns()
    if not host_allowed(endpoint.url, patterns):
        raise HTTPException(
            422,
            f"adapter endpoint {endpoint.url} is not on the allowed hosts "
            f"({', '.join(patterns)}); the Core's operator allows more in "
            "STREAMEVAL_ADAPTER_HOSTS",
        )
    return endpoint


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


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
        if "cache_dir" in request.config.model_fields_set:
            raise _no_cache_dir()
        return _confined(config)
    if not endpoints:
        raise HTTPException(422, "name registered adapters or give a full config")
    if "endpoints" in request.overrides:
        raise HTTPException(422, "overrides cannot set endpoints: name registered adapters")
    if "cache_dir" in request.overrides:
        raise _no_cache_dir()
    try:
        config = RunConfig(endpoints=endpoints, **{"benchmark": "synthetic", **request.overrides})
    except ValidationError as exc:
        raise HTTPException(422, _first_error(exc)) from None
    return _confined(config)


def _no_cache_dir() -> HTTPException:
    return HTTPException(
        422, "cache_dir cannot be set over the API: the Core uses its own (STREAMEVAL_CACHE_DIR)"
    )


def _confined(config: RunConfig) -> RunConfig:
    """The run's endpoints on allowed hosts, its benchmark and video root under the data
    root (resolved, symlinks included), or a 422."""
    for endpoint in config.endpoints:
        _allowed_endpoint(endpoint.url, endpoint.concurrency)
    update: dict[str, Any] = {}
    if config.benchmark != "synthetic":
        update["benchmark"] = str(_under_data_root("benchmark", config.benchmark))
    if config.video_root is not None:
        update["video_root"] = str(_under_data_root("video_root", config.video_root))
    return config.model_copy(update=update) if update else config


def _under_data_root(field: str, value: str) -> Path:
    root_text = os.environ.get(DATA_ROOT_ENV)
    if not root_text:
        raise HTTPException(
            422,
            f"{field}: only the synthetic benchmark can be run over the API unless the Core's "
            f"operator sets {DATA_ROOT_ENV}",
        )
    root = Path(root_text).resolve()
    path = Path(value)
    resolved = (path if path.is_absolute() else root / path).resolve()
    if not resolved.is_relative_to(root):
        raise HTTPException(422, f"{field}: {value!r} is not under the data root ({DATA_ROOT_ENV})")
    return resolved


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
            # Validated when registered, so only a row written around the API (or before
            # the URL rules tightened) gets here; a run on it is refused by `_confined`.
            raise HTTPException(
                409, f"stored adapter endpoint {row.name!r} is invalid: re-register it"
            ) from None
    return registered


def _unavailable(exc: StoreError) -> HTTPException:
    return HTTPException(503, f"adapter registry unavailable: {exc}")


def _status(store: Store, run_id: str, crashes: dict[str, str]) -> RunStatus:
    run = store.get_run(run_id)
    counts = Counter(session.status for session in store.sessions(run_id))
    reason = crashes.get(run_id)
    crashed = reason is not None and run.status in _UNSETTLED
    return RunStatus(
        run_id=run_id,
        # A crash the store could not record is still a failed run.
        status="failed" if crashed else run.status,
        sessions=dict(counts),
        config_hash=run.config_hash,
        reason=reason,
    )

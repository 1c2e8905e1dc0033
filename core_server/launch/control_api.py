"""The Core's control API: register adapter endpoints, start runs, follow their status.
This module builds the app (its token, docs and lifespan); its routes are grouped by
resource: adapters (core_server/launch/control_adapters.py) and runs
(core_server/launch/control_runs.py; what a run over the API may be:
core_server/launch/control_run_config.py).

Every route but `/healthz` and `/readyz` needs `Authorization: Bearer <token>`; the server binds to
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

import os
import secrets
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from streameval.api_docs import Health, add_offline_docs
from streameval.core.errors import CoreError
from streameval.core.launch.control_adapters import adapters_router
from streameval.core.launch.control_runs import BackgroundRuns, runs_router
from streameval.core.store.store import Store
from streameval.web_readiness import add_readiness
from streameval.web_security import ProtectedApp

TOKEN_ENV = "STREAMEVAL_API_TOKEN"
DOCS_ENV = "STREAMEVAL_API_DOCS"
# The token .env.example used to ship: a stack started with it is open to anyone who read it.
EXAMPLE_TOKEN = "change-me"
MIN_TOKEN_CHARS = 16
_BEARER = HTTPBearer(auto_error=False)


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


def create_app(store_url: str, token: str) -> FastAPI:
    """The control API on the store at `store_url`, every route but /healthz and /readyz
    behind `token`."""
    store = Store(store_url)
    runs = BackgroundRuns(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # Once serving (after the listening line; a port that cannot be bound stays one line).
        print(docs_line(), file=sys.stderr, flush=True)
        yield
        await runs.stop()
        store.close()

    docs = docs_enabled()
    # Every answer with the security headers (streameval/web_security.py).
    app = ProtectedApp(
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
    app.get("/healthz", response_model=Health, tags=["service"])(healthz)
    add_readiness(app, store.clock)  # /readyz, and a short store budget for every request
    authorized = [Depends(_bearer_check(token))]
    app.include_router(adapters_router(store), dependencies=authorized)
    app.include_router(runs_router(store, runs), dependencies=authorized)
    return app


def healthz() -> Health:
    """Liveness for health checks, without the token; says nothing about the server."""
    return Health()


def _bearer_check(token: str) -> Callable[..., None]:
    """The dependency every route but /healthz has: the request's bearer token is `token`."""
    expected = token.encode()

    def authorize(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> None:
        # Compared as bytes: compare_digest refuses str with non-ASCII characters (a 500).
        given = None if credentials is None else credentials.credentials.encode()
        if given is None or not secrets.compare_digest(given, expected):
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or wrong bearer token")

    return authorize

"""What both HTTP services (the results API, the Core's control API) do about their store
(docs/robustness.md, "The services while their store is down"):

- `/healthz` is liveness: the process serves. It never asks the store, so a store outage
  does not get a healthy process restarted.
- `/readyz` is readiness: 200 `{"status": "ready"}` when the store answers (it reads the
  store's clock), 503 with one line that names no host or path when it does not. Compose's
  health checks use it, so nothing that needs the store starts on a service that cannot
  reach it.
- Every HTTP request gives the store `REQUEST_RETRY_BUDGET_S` for all its calls together
  (core_server/store/retry.py): a store that is down is a 503 within about a second, not a
  request that hangs for the minute a run waits for its store to come back. A run a request
  starts in the background gets the run's budget again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from streameval.core.store.light import StoreError
from streameval.core.store.retry import REQUEST_RETRY_BUDGET_S, retry_deadline
from streameval.web_security import HttpMiddleware

STORE_UNAVAILABLE = "the store is unavailable"


class Ready(BaseModel):
    """What `GET /readyz` of either API answers while its store answers."""

    status: Literal["ready"] = "ready"


class RequestRetryBudget(HttpMiddleware):
    """ASGI middleware: the store calls of each HTTP request stop retrying at one deadline."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A context variable: the thread a synchronous route runs in inherits it.
        with retry_deadline(REQUEST_RETRY_BUDGET_S):
            await self.app(scope, receive, send)


def add_readiness(app: FastAPI, probe: Callable[[], object]) -> None:
    """The request budget on every request, and `/readyz` answering whether `probe()` (a
    store call) succeeds."""
    app.add_middleware(RequestRetryBudget)

    @app.get(
        "/readyz",
        response_model=Ready,
        tags=["service"],
        responses={503: {"description": "the store does not answer"}},
    )
    def readyz() -> Ready | JSONResponse:
        """Readiness for health checks: whether the store answers."""
        try:
            probe()
        except StoreError:
            return JSONResponse({"detail": STORE_UNAVAILABLE}, status_code=503)
        return Ready()

"""How the results API answers a store or scoring error: 404 for an unknown run, 503 for a
store that cannot answer (one fixed line while it is unreachable), 400 for an unknown
profile, 422 for a run that cannot be scored. No answer names the store: its URL or a
SQLite file's path (a server path, a database host) becomes "the store"."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from streameval.core.store.store import Store, StoreError
from streameval.scorer.errors import ScoreError
from streameval.scorer.profiles import ProfileError
from streameval.web_readiness import STORE_UNAVAILABLE


def store_names(store_url: str, store: Store) -> list[str]:
    """How an error line may name the store: its URL, and a SQLite file's path."""
    names = [store.url, store_url]
    try:
        database = make_url(store_url).database
    except ArgumentError:
        database = None
    if database and store_url.startswith("sqlite"):
        names += [database, str(Path(database).resolve())]
    # Longest first, so that a URL is replaced before the path inside it.
    return sorted({name for name in names if name}, key=len, reverse=True)


def _without_store(message: str, names: list[str]) -> str:
    """An error line with the store's URL or path (a server path, a database host) taken out."""
    for name in names:
        message = message.replace(name, "the store")
    return message


def add_error_handlers(app: FastAPI, hidden: list[str]) -> None:
    """Answer StoreError and ScoreError with their status, `hidden` (store_names) taken out."""

    @app.exception_handler(StoreError)
    async def _store_error(_: Request, exc: StoreError) -> JSONResponse:
        message = str(exc)
        if message.startswith("unknown run id"):
            # "unknown run id 'x' in store sqlite:////path": the run, not where it was looked.
            detail = _without_store(message, hidden).removesuffix(" in store the store")
            return JSONResponse(status_code=404, content={"detail": detail})
        if exc.transient:  # the driver's line names the database host
            return JSONResponse(status_code=503, content={"detail": STORE_UNAVAILABLE})
        return JSONResponse(status_code=503, content={"detail": _without_store(message, hidden)})

    @app.exception_handler(ScoreError)
    async def _score_error(_: Request, exc: ScoreError) -> JSONResponse:
        status = 400 if isinstance(exc, ProfileError) else 422
        return JSONResponse(status_code=status, content={"detail": str(exc)})

"""Where streameval keeps things by default, shared by every command."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "STREAMEVAL_CACHE_DIR"
STORE_ENV = "STREAMEVAL_STORE"


def default_cache_dir() -> Path:
    """Frames, generated benchmarks and the default store; STREAMEVAL_CACHE_DIR moves it."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "streameval"


def resolve_store_url(value: str | None, cache_dir: Path | None = None) -> str:
    """--store, else $STREAMEVAL_STORE, else a SQLite file in the cache directory."""
    if value:
        return value
    if os.environ.get(STORE_ENV):
        return os.environ[STORE_ENV]
    directory = cache_dir or default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'streameval.db'}"

"""Where streameval keeps things by default, shared by every command."""

from __future__ import annotations

import os
from pathlib import Path

from streameval.core.errors import CoreError

CACHE_ENV = "STREAMEVAL_CACHE_DIR"
STORE_ENV = "STREAMEVAL_STORE"


class CacheDirError(CoreError):
    """The cache directory (which holds the default store) cannot be created."""


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
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # read-only, full, a file in the way, a symlink loop
        raise CacheDirError(
            f"cache directory {directory} cannot be created ({exc.strerror or exc})"
        ) from None
    return f"sqlite:///{directory / 'streameval.db'}"

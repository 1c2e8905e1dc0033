"""Where streameval keeps things by default, shared by every command, and how a `--store`
value becomes a store URL."""

from __future__ import annotations

import os
import re
from pathlib import Path

from streameval.core.errors import CoreError

CACHE_ENV = "STREAMEVAL_CACHE_DIR"
STORE_ENV = "STREAMEVAL_STORE"
DEFAULT_STORE_NAME = "streameval.db"

_SQLITE_DRIVERS = ("sqlite", "sqlite+pysqlite")
_POSTGRESQL_DRIVERS = ("postgresql", "postgresql+psycopg")
_ACCEPTED = "give a file path, sqlite:///FILE or postgresql+psycopg://USER@HOST/DATABASE"
# `sqlite:/x.db` or `postgresql:host/db`: meant as a URL, not as a file named so.
_URL_WITHOUT_SLASHES = re.compile(r"^(sqlite|postgres(ql)?)(\+\w+)?:", re.IGNORECASE)
_PASSWORD = re.compile(r"(://[^/:@]*:)[^@/]*@")


class CacheDirError(CoreError):
    """The cache directory (which holds the default store) cannot be created."""


def default_cache_dir() -> Path:
    """Frames, generated benchmarks and the default store; STREAMEVAL_CACHE_DIR moves it."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured) if configured else Path.home() / ".cache" / "streameval"


def resolve_store_url(
    value: str | None, cache_dir: Path | None = None, *, must_exist: bool = False
) -> str:
    """The store URL of --store, else of $STREAMEVAL_STORE, else a SQLite file in the cache
    directory.

    `results.db`, `~/runs/x.sqlite` and `sqlite:///results.db` all name a SQLite file, made
    absolute here so that every message names it in full; `postgresql://` and
    `postgresql+psycopg://` URLs pass as given. Commands that only read pass
    `must_exist=True`: a SQLite file that is not there is refused instead of created (a
    mistyped path would otherwise show as a store without runs). Mistakes raise a one-line
    StoreError.
    """
    given = value or os.environ.get(STORE_ENV)
    if given:
        return _parse_store_url(given, must_exist)
    directory = cache_dir or default_cache_dir()
    if not must_exist:
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # read-only, full, a file in the way, a symlink loop
            raise CacheDirError(
                f"cache directory {directory} cannot be created ({exc.strerror or exc})"
            ) from None
    return _sqlite_url(directory / DEFAULT_STORE_NAME, must_exist)


def _parse_store_url(value: str, must_exist: bool) -> str:
    if "://" not in value:
        if _URL_WITHOUT_SLASHES.match(value):
            raise _store_error(
                f"malformed store URL {_masked(value)}: a URL has `://` after its scheme "
                "(sqlite:///FILE, three slashes), or give the file path alone"
            )
        return _sqlite_url(Path(value), must_exist)
    plain = sqlite_file(value)
    if plain is not None:
        return _sqlite_url(plain, must_exist)
    # Imported here: every command imports this module, and a file path or a plain
    # sqlite:/// URL needs none of it (`streameval runs` reads SQLite without SQLAlchemy).
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(value)
    except (ArgumentError, ValueError) as exc:
        # make_url's only ValueError is a port that is not a number.
        reason = "not a URL" if isinstance(exc, ArgumentError) else "its port is not a number"
        raise _store_error(
            f"malformed store URL {_masked(value)} ({reason}); {_ACCEPTED}"
        ) from None
    if url.drivername in _POSTGRESQL_DRIVERS:
        return value
    if url.drivername not in _SQLITE_DRIVERS:
        raise _store_error(
            f"unknown store URL scheme {url.drivername!r} in {_masked(value)}; {_ACCEPTED}"
        )
    # In memory, or SQLite's own `file:` URI form: nothing on disk to check or make absolute.
    if url.database in (None, "", ":memory:") or url.database.startswith("file:"):
        return value
    path = _checked_file(Path(url.database), must_exist)
    return url.set(database=str(path)).render_as_string(hide_password=False)


def default_store_url(directory: Path) -> str:
    """The URL of the store file named DEFAULT_STORE_NAME in `directory`."""
    return f"sqlite:///{Path(directory) / DEFAULT_STORE_NAME}"


def sqlite_file(url: str) -> Path | None:
    """The file of a plain `sqlite:///PATH` URL (as `resolve_store_url` makes of a path);
    None for any other URL (PostgreSQL, in memory, `file:` URIs, query options, and any
    percent-escape, which only SQLAlchemy's URL parsing decodes the same way). Such a URL is
    read without SQLAlchemy, whose import costs more than all of `streameval runs`."""
    prefix = "sqlite:///"
    if not url.startswith(prefix) or "?" in url or "%" in url:
        return None
    database = url.removeprefix(prefix)
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def _sqlite_url(path: Path, must_exist: bool) -> str:
    return f"sqlite:///{_checked_file(path, must_exist)}"


def _checked_file(path: Path, must_exist: bool) -> Path:
    """The SQLite file's absolute path (`~` expanded), if it can be a store here."""
    path = Path(os.path.abspath(path.expanduser()))
    if path.is_dir():
        raise _store_error(f"store {path} is a folder; give the store file in it")
    if must_exist and not path.exists():
        raise _store_error(
            f"no store at {path} (the file does not exist; a read-only command does not "
            "create one: check the path, or run first)"
        )
    if not path.parent.is_dir():
        raise _store_error(f"cannot create store {path}: the folder {path.parent} does not exist")
    return path


def _masked(value: str) -> str:
    """The URL as the user gave it, quoted, its password (if any) hidden."""
    return repr(_PASSWORD.sub(r"\1***@", value))


def _store_error(message: str) -> CoreError:
    # A StoreError, which every command that opens a store already reports as one line.
    from streameval.core.store.light import StoreError

    return StoreError(message)

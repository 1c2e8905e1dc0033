"""Shared fixtures.

Store fixtures: every store test runs on SQLite (a file in tmp_path) and on PostgreSQL (a
fresh database per test on the server named by STREAMEVAL_TEST_PG_URL; start one with
`eval "$(.ci/start-postgres.sh)"`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from streameval.core.store.store import Store

PG_URL_ENV = "STREAMEVAL_TEST_PG_URL"


def _fresh_pg_database(server_url: str) -> Iterator[str]:
    """Create a uniquely named database on the server, yield its URL, then drop it."""
    import psycopg

    url = make_url(server_url)
    name = f"streameval_test_{uuid.uuid4().hex[:12]}"
    conninfo = {
        "host": url.host,
        "port": url.port,
        "user": url.username,
        "password": url.password,
        "dbname": url.database or "postgres",
    }
    with psycopg.connect(autocommit=True, **{k: v for k, v in conninfo.items() if v}) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            # FORCE ends connections a failed test may have left open.
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    yield from _fresh_pg_database(pg_server_url())


def admin_sql(server_url: str, sql: str) -> None:
    """One statement on the server's maintenance database, on a connection of its own (a
    restart of the server ends every connection open before it)."""
    import psycopg

    url = make_url(server_url)
    conninfo = {"host": url.host, "port": url.port, "user": url.username}
    with psycopg.connect(autocommit=True, dbname=url.database or "postgres", **conninfo) as conn:
        conn.execute(sql)


@pytest.fixture
def pg_database() -> Iterator[tuple[str, str]]:
    """A fresh database on the test server and the server's data folder, for tests that
    restart the server (tests/faults.py restart_postgres)."""
    server = pg_server_url()
    data = os.environ.get("STREAMEVAL_TEST_PG_DATA")
    if not data:
        pytest.skip("STREAMEVAL_TEST_PG_DATA is not set; restarting the server needs it")
    name = f"streameval_test_{uuid.uuid4().hex[:12]}"
    admin_sql(server, f'CREATE DATABASE "{name}"')
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False), data
    finally:
        admin_sql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_server_url() -> str:
    """The test PostgreSQL server; skips without one, fails where CI requires it."""
    server_url = os.environ.get(PG_URL_ENV)
    if not server_url:
        if os.environ.get("STREAMEVAL_REQUIRE_PG"):
            pytest.fail(f"{PG_URL_ENV} is not set but STREAMEVAL_REQUIRE_PG is")
        pytest.skip(f"{PG_URL_ENV} is not set; start a server with .ci/start-postgres.sh")
    return server_url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    with Store(store_url) as opened:
        yield opened


# --------------------------------------------------------------------------- Core fixtures

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory) -> None:
    """No test reads or writes the user's ~/.cache/streameval (child processes included)."""
    cache = tmp_path_factory.getbasetemp() / "streameval-cache"
    monkeypatch.setenv("STREAMEVAL_CACHE_DIR", str(cache))
    monkeypatch.delenv("STREAMEVAL_STORE", raising=False)


@pytest.fixture
def adapter_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Environment for test adapters run as child processes: importable `tests` package and a
    folder where `LoggingAdapter` writes what it received."""
    log_dir = tmp_path / "adapter-log"
    log_dir.mkdir()
    monkeypatch.setenv("STREAMEVAL_TEST_LOG", str(log_dir))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return log_dir


@pytest.fixture
def benchmark_path(tmp_path: Path) -> Path:
    from tests.timeline_fixtures import write_benchmark

    return write_benchmark(tmp_path / "bench")


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every video the frame pipeline decodes in full (each one a cache entry built)."""
    from streameval.core.frames import entries

    calls: list[str] = []
    real_sample = entries.sample_video

    def counting_sample(path, *args, **kwargs):
        calls.append(str(path))
        return real_sample(path, *args, **kwargs)

    monkeypatch.setattr(entries, "sample_video", counting_sample)
    return calls


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The stand-in `vllm` package (tests/vllm_stand_in.py), importable here and in served
    adapter processes; a function that scripts it and returns the path of its call log."""
    from tests.vllm_stand_in import forget_vllm, script_stand_in

    yield script_stand_in(monkeypatch, tmp_path / "vllm-calls.jsonl")
    forget_vllm()

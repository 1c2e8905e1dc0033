"""`--store` as a user types it: a plain file path, `~`, a sqlite:/// or postgresql:// URL; a
read-only command never creates a store; a wrong URL is one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from streameval.core.store.locations import STORE_ENV, resolve_store_url
from streameval.core.store.store import Store, StoreError
from tests.test_cli import streameval

ACCEPTED = "give a file path, sqlite:///FILE or postgresql+psycopg://USER@HOST/DATABASE"


def no_store(path: Path) -> str:
    return (
        f"no store at {path} (the file does not exist; a read-only command does not create "
        "one: check the path, or run first)"
    )


def test_a_plain_path_is_a_sqlite_file_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    assert resolve_store_url("results.db") == f"sqlite:///{tmp_path}/results.db"
    assert resolve_store_url("./x/y.sqlite") == f"sqlite:///{tmp_path}/x/y.sqlite"
    assert resolve_store_url("x/../results.db") == f"sqlite:///{tmp_path}/results.db"
    assert resolve_store_url(str(tmp_path / "a.db")) == f"sqlite:///{tmp_path}/a.db"


def test_tilde_is_the_home_folder_in_a_path_and_in_a_sqlite_url(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_store_url("~/runs.db") == f"sqlite:///{tmp_path}/runs.db"
    assert resolve_store_url("sqlite:///~/runs.db") == f"sqlite:///{tmp_path}/runs.db"


def test_sqlite_urls_become_absolute_and_keep_their_query(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_store_url("sqlite:///rel.db") == f"sqlite:///{tmp_path}/rel.db"
    absolute = f"sqlite:///{tmp_path}/s.db?timeout=5"
    assert resolve_store_url(absolute) == absolute
    assert resolve_store_url("sqlite://") == "sqlite://"  # in memory


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://eval:p%40ss@db.example:5432/streameval",
        "postgresql://eval@db.example/streameval?sslmode=require",
    ],
)
def test_postgresql_urls_pass_as_given(url):
    assert resolve_store_url(url) == url
    assert resolve_store_url(url, must_exist=True) == url  # the server checks those


def test_the_environment_variable_takes_a_path_too_and_store_wins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(STORE_ENV, "env.db")
    assert resolve_store_url(None) == f"sqlite:///{tmp_path}/env.db"
    assert resolve_store_url("given.db") == f"sqlite:///{tmp_path}/given.db"


def test_the_default_store_is_made_for_writers_only(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(StoreError) as caught:
        resolve_store_url(None, cache, must_exist=True)
    assert str(caught.value) == no_store(cache / "streameval.db")
    assert not cache.exists()
    assert resolve_store_url(None, cache) == f"sqlite:///{cache}/streameval.db"
    assert cache.is_dir() and not (cache / "streameval.db").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "mysql://eval:secret@db/x",
            f"unknown store URL scheme 'mysql' in 'mysql://eval:***@db/x'; {ACCEPTED}",
        ),
        (
            "postgresql://eval:secret@db:port/x",
            "malformed store URL 'postgresql://eval:***@db:port/x' (its port is not a number); "
            + ACCEPTED,
        ),
        ("://nothing", f"malformed store URL '://nothing' (not a URL); {ACCEPTED}"),
        (
            "sqlite:/results.db",
            "malformed store URL 'sqlite:/results.db': a URL has `://` after its scheme "
            "(sqlite:///FILE, three slashes), or give the file path alone",
        ),
        ("{tmp}", "store {tmp} is a folder; give the store file in it"),
        (
            "{tmp}/nowhere/s.db",
            "cannot create store {tmp}/nowhere/s.db: the folder {tmp}/nowhere does not exist",
        ),
    ],
)
def test_a_wrong_store_is_one_line(value, message, tmp_path):
    with pytest.raises(StoreError) as caught:
        resolve_store_url(value.format(tmp=tmp_path))
    assert str(caught.value) == message.format(tmp=tmp_path)


# --------------------------------------------------------------------------- commands


READ_ONLY_COMMANDS = [
    ["runs"],
    ["runs", "r1"],
    ["runs", "delete", "r1", "--yes"],
    ["export", "r1"],
    ["score", "r1"],
    ["compare", "r1", "r2"],
    ["report", "r1", "--html", "out.html"],
    ["results-api", "--port", "0"],
]


@pytest.mark.parametrize("args", READ_ONLY_COMMANDS, ids=lambda args: " ".join(args[:2]))
def test_a_read_only_command_refuses_a_missing_store_and_creates_none(args, tmp_path):
    done = streameval(*args, "--store", "typo/runs.db", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {no_store(tmp_path / 'typo' / 'runs.db')}"]
    assert os.listdir(tmp_path) == []


def test_commands_take_a_plain_path_and_name_a_wrong_url_in_one_line(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'results.db'}") as store:
        store.create_run("r1", "synthetic", {"profile": "trace"})
    listed = streameval("runs", "--json", "--store", "results.db", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [run["run_id"] for run in json.loads(listed.stdout)] == ["r1"]

    home = {**os.environ, "HOME": str(tmp_path)}
    exported = streameval("export", "r1", "-o", "-", "--store", "~/results.db", env=home)
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout.splitlines()[0])["run_id"] == "r1"

    wrong = streameval("run", "--adapter-url", "ws://127.0.0.1:9/ws", "--store", "mysql://db/x")
    assert wrong.returncode == 2
    assert wrong.stderr.splitlines() == [
        f"error: unknown store URL scheme 'mysql' in 'mysql://db/x'; {ACCEPTED}"
    ]

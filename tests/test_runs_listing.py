"""`streameval runs` as a user reads it: which runs were robustness runs and under which
perturbations, and a store of an older or newer schema (the listing opens it read-only;
`--migrate` upgrades an older one)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine

from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.store.light import MIGRATIONS_DIR, schema_versions
from streameval.core.store.store import Store
from tests.test_cli import streameval

STANDARD = [
    "jitter:max=0.25",
    "drop:p=0.1",
    "duplicate:p=0.1",
    "rate:factor=0.5,period=30",
    "burst:every=20,hold=5",
    "cut:at=50%",
    "negative",
]


def test_a_robustness_run_lists_its_perturbations_and_a_clean_run_none(
    adapter_env, benchmark_path, tmp_path
):
    store = f"sqlite:///{tmp_path / 's.db'}"
    common = ["--benchmark", str(benchmark_path), "--cache-dir", str(tmp_path / "c")]
    common += ["--store", store, "--json"]
    variants = {
        "clean": [],
        "perturbed": ["--perturb", "drop:p=0.5", "--perturb", "jitter"],
        "standard": ["--robustness", "standard", "--perturb", "drop:p=0.5"],
    }
    ran = {}
    with AdapterProcess("always") as adapter:
        for name, flags in variants.items():
            done = streameval("run", "--adapter-url", adapter.url, *flags, *common)
            assert done.returncode == 0, done.stderr
            ran[json.loads(done.stdout)["run_id"]] = name

    listed = streameval("runs", "--json", "--store", store)
    assert listed.returncode == 0, listed.stderr
    shown = {ran[row["run_id"]]: row for row in json.loads(listed.stdout)}
    assert {
        name: (row["perturbations"], row["robustness_preset"]) for name, row in shown.items()
    } == {
        "clean": ([], None),
        "perturbed": (["drop:p=0.5", "jitter:max=0.25"], None),
        "standard": ([*STANDARD, "drop:p=0.5"], "standard"),
    }

    table = streameval("runs", "--store", store, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == [
        "run", "created", "status", "benchmark", "profile", "pacing", "adapters", "settings",
        "perturbations",
    ]  # fmt: skip
    # The `always` baseline takes no options: its settings cell is empty.
    row = {name: next(line for line in lines if run_id in line) for run_id, name in ran.items()}
    cells = {name: re.split(r"\s{2,}", line.strip())[-2:] for name, line in row.items()}
    assert cells == {
        "clean": ["logical", "always 1 (baseline-always)"],
        "perturbed": ["always 1 (baseline-always)", "drop, jitter"],
        "standard": [
            "always 1 (baseline-always)",
            "jitter, drop, duplicate, rate, burst, cut, negative",
        ],
    }


def alembic_upgrade(path: Path, revision: str) -> None:
    """A store as a streameval of schema `revision` made it."""
    engine = create_engine(f"sqlite:///{path}")
    try:
        with engine.begin() as conn:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = conn
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def version_of(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    conn.close()
    return version


def test_listing_reads_without_writing_and_migrates_an_older_store_when_asked(tmp_path):
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    with Store(url) as store:
        store.create_run("r1", "synthetic", {"profile": "trace", "pacing": "logical"})
    before = path.read_bytes()
    listed = streameval("runs", "--json", "--store", url)
    assert [row["run_id"] for row in json.loads(listed.stdout)] == ["r1"]
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["s.db"]

    # A store an older streameval made: refused in one line, untouched, unless --migrate.
    older = tmp_path / "older.db"
    alembic_upgrade(older, schema_versions()[-2])
    before = older.read_bytes()
    for args in (["runs"], ["runs", "r1"]):
        refused = streameval(*args, "--json", "--store", f"sqlite:///{older}")
        assert refused.returncode == 2
        assert refused.stderr.splitlines() == [
            f"error: store sqlite:///{older} has schema version {schema_versions()[-2]}, older "
            f"than this streameval's {schema_versions()[-1]}; upgrade it once with "
            "`streameval runs --migrate` (which writes to it)"
        ]
    assert older.read_bytes() == before
    listed = streameval("runs", "--migrate", "--json", "--store", f"sqlite:///{older}")
    assert (listed.returncode, listed.stdout.strip()) == (0, "[]"), listed.stderr
    assert version_of(older) == schema_versions()[-1]


def test_a_store_of_a_newer_schema_is_one_line(tmp_path):
    path = tmp_path / "s.db"
    with Store(f"sqlite:///{path}"):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    conn.close()
    for args in (["runs"], ["runs", "r1"]):
        done = streameval(*args, "--store", f"sqlite:///{path}")
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            f"error: store sqlite:///{path} has schema version 9999, which this streameval "
            f"(schema {schema_versions()[-1]}) does not know: a newer streameval made it; "
            "upgrade to read it"
        ]
    assert version_of(path) == "9999"

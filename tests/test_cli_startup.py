"""`streameval --help` starts fast because building the command tree imports no runtime
stack: the store (SQLAlchemy, Alembic), video (PyAV, NumPy), HTTP and WebSocket clients
and the servers are imported by the commands that use them. (pydantic is not checked: Typer
itself imports it to read some parameter types.) The time
itself is measured in bench/bench_startup.py; this checks the cause, in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from streameval.core.store.store import Store

# What the command tree must not import: each costs 0.1-0.4 s to import.
RUNTIME = (
    "alembic",
    "av",
    "fastapi",
    "httpx",
    "msgspec",
    "numpy",
    "sqlalchemy",
    "uvicorn",
    "websockets",
)


def _modules_after(code: str) -> tuple[set[str], str]:
    """Every module loaded once `code` ran in a new process, and what it printed before."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    *printed, modules = out.splitlines()
    return set(json.loads(modules)), "\n".join(printed)


def _imported_after(code: str) -> set[str]:
    return {name.partition(".")[0] for name in _modules_after(code)[0]}


def _command(argv: list[str]) -> str:
    """`streameval ARGV` as the code of a probe: its exit status must be 0."""
    return (
        "import sys, streameval.cli\n"
        f"sys.argv = ['streameval', *{argv!r}]\n"
        "try:\n    streameval.cli.main()\nexcept SystemExit as exc:\n    assert not exc.code\n"
    )


def test_building_the_command_tree_imports_no_runtime_stack() -> None:
    code = "import typer.main, streameval.cli\ntyper.main.get_command(streameval.cli.app)"
    assert sorted(_imported_after(code) & set(RUNTIME)) == []


@pytest.mark.parametrize("argv", [["--help"], ["runs", "--help"], ["score", "--help"]])
def test_help_lists_the_commands_without_the_runtime(argv: list[str]) -> None:
    assert sorted(_imported_after(_command(argv)) & set(RUNTIME)) == []


@pytest.mark.parametrize(
    ("argv", "as_url", "listed", "allowed"),
    [
        # The runs of a SQLite file, named by its path or a plain sqlite:/// URL: read with
        # the standard library alone.
        (["runs"], False, '"run_id": "r1"', set()),
        (["runs"], True, '"run_id": "r1"', set()),
        (["runs", "r1"], False, '"session_id": "qa:001"', {"sqlalchemy"}),
    ],
    ids=["runs", "runs-url", "sessions"],
)
def test_listing_runs_imports_neither_the_runner_nor_migrations(
    argv: list[str], as_url: bool, listed: str, allowed: set[str], tmp_path: Path
) -> None:
    """`streameval runs` reads the store read-only: no Alembic, no runner, no run-input
    checks, no video or network stack (bench/bench_startup.py measures the CPU saved)."""
    path = tmp_path / "s.db"
    with Store(f"sqlite:///{path}") as store:
        store.create_run("r1", "synthetic", {"profile": "trace"})
        store.add_sessions("r1", [("qa:001", ["qa:001"])])
    store = f"sqlite:///{path}" if as_url else str(path)
    loaded, printed = _modules_after(_command([*argv, "--json", "--store", store]))
    assert listed in printed, printed  # the listing itself ran
    heavy = {"streameval.core.run.runner", "streameval.core.run.inputs"}
    tops = {name.partition(".")[0] for name in loaded}
    assert sorted(loaded & heavy) + sorted(tops & set(RUNTIME) - allowed) == []

"""`streameval --help` starts fast because building the command tree imports no runtime
stack: the store (SQLAlchemy, Alembic), video (PyAV, NumPy), HTTP and WebSocket clients
and the servers are imported by the commands that use them. (pydantic is not checked: Typer
itself imports it to read some parameter types.) The time
itself is measured in bench/bench_startup.py; this checks the cause, in a new process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

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


def _imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return {name.partition(".")[0] for name in json.loads(out.splitlines()[-1])}


def test_building_the_command_tree_imports_no_runtime_stack() -> None:
    code = "import typer.main, streameval.cli\ntyper.main.get_command(streameval.cli.app)"
    assert sorted(_imported_after(code) & set(RUNTIME)) == []


@pytest.mark.parametrize("argv", [["--help"], ["runs", "--help"], ["score", "--help"]])
def test_help_lists_the_commands_without_the_runtime(argv: list[str]) -> None:
    code = (
        "import sys, streameval.cli\n"
        f"sys.argv = ['streameval', *{argv!r}]\n"
        "try:\n    streameval.cli.main()\nexcept SystemExit as exc:\n    assert exc.code == 0\n"
    )
    assert sorted(_imported_after(code) & set(RUNTIME)) == []


def test_the_help_names_every_command() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    ).stdout
    for command in ("run", "runs", "score", "compare", "report", "demo", "results-api"):
        assert f" {command} " in shown, command

"""The help screens a user meets first: every command's --help fits 80 columns with every
word of its text whole, flags read as flags, the top-level commands come in panels; and
`--version`, and the one-line errors for a profile of the wrong kind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import typer.main
from rich.cells import cell_len
from typer.testing import CliRunner

from streameval.cli import app
from streameval.core.config import PROTOCOL_PROFILES
from streameval.core.store.store import Store
from streameval.scorer.profiles import SCORING_PROFILES

WIDTH = 80
# A Python type shown as a value name: `<bool>`, `<float>`, `<list[str]>`.
TYPE_METAVAR = re.compile(r"<[a-z]+(\[[a-z]+\])?>")


def _commands(command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    """Every command of the tree with its path of names, the root first."""
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def shown_help(*path: str) -> str:
    runner = CliRunner(env={"COLUMNS": str(WIDTH)})
    done = runner.invoke(app, [*path, "--help"], prog_name="streameval")
    assert done.exit_code == 0, done.output
    return done.output


def test_the_walk_reaches_nested_commands() -> None:
    paths = {path for path, _ in COMMANDS}
    assert {(), ("run",), ("runs",), ("runs", "delete"), ("data", "validate")} <= paths
    assert len(paths) > 20


@pytest.mark.parametrize(
    ("path", "command"), COMMANDS, ids=[" ".join(path) or "streameval" for path, _ in COMMANDS]
)
def test_every_help_fits_80_columns_whole(path: tuple[str, ...], command) -> None:
    shown = shown_help(*path)
    lines = shown.splitlines()
    assert lines[0].startswith(f"Usage: {' '.join(('streameval', *path))} ")
    wide = [line for line in lines if cell_len(line) > WIDTH]
    assert not wide, wide
    assert "…" not in shown
    assert not TYPE_METAVAR.search(shown), TYPE_METAVAR.search(shown)
    words = set(shown.split())
    texts = [command.help or ""]
    for param in command.params:
        texts.append(getattr(param, "help", None) or "")
        if getattr(param, "hidden", False) or param.param_type_name != "option":
            continue
        (opt,) = [opt for opt in param.opts if opt.startswith("--")]  # each has one
        # `--json` bare (a flag takes no value), `-o, --output PATH` with a value name.
        term = rf"^  (-\w, )?{re.escape(opt)}"
        after = r"( / --[\w-]+)?(  |$)" if param.is_flag else r" [A-Z]"
        assert re.search(term + after, shown, re.M), (opt, shown)
    # Each word of the docstring and of every option's help, whole: wrapped, never cut.
    for text in texts:
        for word in text.split():
            assert word in words, (word, shown)


def test_flags_take_no_value() -> None:
    shown = shown_help("runs")
    assert re.search(r"^  --json {2,}Print a JSON list\.$", shown, re.M), shown


def test_runs_json_is_a_flag(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 's.db'}"
    Store(store).close()
    # Were --json to take a value, it would take `--store` for it.
    done = CliRunner().invoke(app, ["runs", "--json", "--store", store])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == []


def test_docstrings_read_as_paragraphs() -> None:
    """A docstring's line breaks fit the source, not the terminal: joined, then wrapped."""
    shown = shown_help("runs").splitlines()
    assert shown[2:4] == [
        "List stored runs, newest first, with their declared conditions and perturbations",
        "(or one run's sessions, with the host, worker and GPU that ran each).",
    ]


def test_the_top_level_commands_come_in_panels_in_order() -> None:
    shown = shown_help()
    panels: dict[str, list[str]] = {}
    current = None
    for line in shown.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            current = panels.setdefault(line[:-1], [])
        elif current is not None and re.match(r"^  [-a-z]", line):
            current.append(line.split()[0])
    assert panels == {
        "Options": ["--version", "--install-completion", "--show-completion", "--help"],
        "Getting started": ["demo", "profiles"],
        "Evaluate": ["run", "eval", "runs", "score", "compare", "table", "report", "export"],
        "Serve": ["results-api", "core-api", "adapter"],
        "Scale": ["worker", "launch", "plan"],
        "Data": ["data", "synth"],
        "Analyses": ["capacity", "audit"],
    }
    # Every command of the tree's top level is in one of them.
    top = {path[0] for path, _ in COMMANDS if len(path) == 1}
    assert top == {name for title, names in panels.items() if title != "Options" for name in names}


def test_version_prints_the_installed_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"streameval {version('streameval')}\n"


def _error_line(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


PROTOCOL_NAMES = ", ".join(PROTOCOL_PROFILES)
SCORING_NAMES = ", ".join(SCORING_PROFILES)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["run", "--adapter-url", "ws://127.0.0.1:9/ws", "--profile", "trace-paper-v1"],
            "error: unknown protocol profile 'trace-paper-v1' ('trace-paper-v1' is a scoring "
            f"profile, for score, compare and report); protocol profiles: {PROTOCOL_NAMES}",
        ),
        (
            ["capacity", "--adapter-url", "ws://127.0.0.1:9/ws", "--slo", "ttft_p95=1"]
            + ["--profile", "nope"],
            f"error: unknown protocol profile 'nope'; protocol profiles: {PROTOCOL_NAMES}",
        ),
        (
            ["score", "--events", "run.jsonl", "--profile", "trace-full-prefix"],
            "error: unknown scoring profile 'trace-full-prefix' ('trace-full-prefix' is a "
            f"protocol profile, for run and capacity); scoring profiles: {SCORING_NAMES}",
        ),
        (
            ["score", "--events", "run.jsonl", "--profile", "nope"],
            f"error: unknown scoring profile 'nope'; scoring profiles: {SCORING_NAMES}",
        ),
    ],
)
def test_an_unknown_profile_names_its_kind_and_the_other(args, expected, tmp_path) -> None:
    assert _error_line(*args, *(["--store", str(tmp_path / "s.db")])) == expected


def test_profile_options_name_their_kind() -> None:
    for command in ("run", "capacity"):
        assert re.search(r"^  --profile TEXT +Protocol profile:", shown_help(command), re.M)
    for command in ("score", "compare", "report"):
        assert "Scoring profile:" in shown_help(command)

"""`streameval runs`: list a store's runs (or one run's sessions), and `runs delete`.

Listing is typed often and should cost no more than `streameval --help`: it reads the
store read-only, importing neither Alembic nor the runner, nor SQLAlchemy for a SQLite
file (tests/test_cli_startup.py; bench/bench_startup.py measures its CPU against `--help`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperGroup

from streameval.core.cli.common import JsonOption, StoreOption, console, fail
from streameval.core.run.adapter_identity import (
    adapter_identity,
    identity_label,
    run_settings,
    setting_differences,
)
from streameval.core.store.locations import default_cache_dir, resolve_store_url
from streameval.terminal import Column, print_table

# The store (SQLAlchemy) is imported by the commands: `streameval --help` needs none of it.
if TYPE_CHECKING:
    from streameval.core.store.light import RunInfo
    from streameval.core.store.store import Store


class _RunsGroup(TyperGroup):
    """`runs [RUN_ID]` lists, `runs delete RUN...` deletes. A first word naming a subcommand
    is that subcommand, any other the listing's RUN_ID (plain Click would take `delete` for
    the optional RUN_ID), and options may follow it (`runs RUN_ID --json`) as in a command."""

    allow_interspersed_args = True

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            super().parse_args(ctx, [])  # the listing's own options keep their defaults
            ctx._protected_args, ctx.args = args[:1], args[1:]
            return ctx.args
        return super().parse_args(ctx, args)


runs_app = typer.Typer(
    cls=_RunsGroup, subcommand_metavar="[COMMAND [ARGS]...]", pretty_exceptions_enable=False
)


@runs_app.callback(invoke_without_command=True)
def runs(
    ctx: typer.Context,
    run_id: Annotated[
        str | None, typer.Argument(help="List this run's sessions: who ran each, where.")
    ] = None,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
    migrate: Annotated[
        bool,
        typer.Option(
            "--migrate",
            help="Upgrade a store an older streameval made to this one's schema (the one "
            "time the listing writes), then list it.",
        ),
    ] = False,
) -> None:
    """List stored runs, newest first, with their declared conditions and perturbations (or
    one run's sessions, with the host, worker and GPU that ran each).

    The settings column shows the adapter options that differ between the listed runs of
    one adapter; `--json` gives every setting of each run."""
    if ctx.invoked_subcommand is not None:  # `runs delete ...`
        return
    if run_id is not None:
        _list_sessions(run_id, store, as_json, migrate)
        return
    from streameval.core.store.light import StoreError
    from streameval.variants import read_condition

    try:
        infos = _stored_runs(resolve_store_url(store, must_exist=True), migrate)
    except StoreError as exc:
        raise fail(str(exc)) from None
    rows = []
    for info in infos:
        identities = _identities(info.conditions.get("adapters") or [])
        robustness = read_condition(info.conditions)
        rows.append(
            {
                "run_id": info.run_id,
                "created_at": info.created_at.isoformat(timespec="seconds"),
                "status": info.status,
                "benchmark": info.benchmark,
                "profile": info.config.get("profile", ""),
                "pacing": info.config.get("pacing", ""),
                "adapters": [identity_label(identity) for identity in identities],
                "adapter_identities": identities,
                "settings": run_settings(info.conditions),
                "perturbations": [v.label for v in robustness.variants] if robustness else [],
                "robustness_preset": robustness.preset if robustness else None,
            }
        )
    if as_json:
        print(json.dumps(rows))
        return
    columns = [
        Column("run", key=True),
        Column("created", key=True),
        Column("status", key=True),
        Column("benchmark", key=True),
        Column("profile", key=True),
        Column("pacing", key=True),
        Column("adapters"),
        Column("settings"),
        Column("perturbations"),
    ]
    varying = _varying_settings(rows)
    cells = [
        [
            row["run_id"],
            row["created_at"],
            Text(row["status"], style=STATUS_STYLES.get(row["status"], "")),
            row["benchmark"],
            row["profile"],
            row["pacing"],
            "\n".join(row["adapters"]),  # every adapter the run used, one a line
            _settings_cell(row["settings"], varying.get(_adapter_name(row), set())),
            _perturbation_names(row["perturbations"]),
        ]
        for row in rows
    ]
    print_table(Console(), columns, cells)


STATUS_STYLES = {"failed": "red", "interrupted": "yellow", "finished": "green"}
SESSION_COLUMNS = ("session_id", "status", "attempt", "host", "worker_id", "gpu", "endpoint")


def _adapter_name(row: dict) -> str | None:
    identities = row["adapter_identities"]
    return identities[-1]["adapter"] if identities else None


def _varying_settings(rows: list[dict]) -> dict[str | None, set[str]]:
    """For each adapter name, the settings whose value is not the same in every listed run
    of that adapter: what tells its runs apart."""
    varying: dict[str | None, set[str]] = {}
    first: dict[str | None, dict] = {}
    for row in rows:
        name = _adapter_name(row)
        seen = first.setdefault(name, row["settings"])
        keys = varying.setdefault(name, set())
        keys.update(key for key, _a, _b in setting_differences(seen, row["settings"]))
    return varying


def _settings_cell(settings: dict, varying: set[str]) -> str:
    """The settings that differ between the listed runs of this adapter, `key=value` one a
    line, then how many more the run declared (all of them: `--json`)."""
    shown = [f"{key}={json.dumps(value)}" for key, value in settings.items() if key in varying]
    rest = len(settings) - len(shown)
    if rest:
        shown.append(f"+{rest} more" if shown else f"{rest} settings (--json)")
    return "\n".join(shown)


def _perturbation_names(labels: list[str]) -> str:
    """`jitter, drop, negative`: each variant's name once (its parameters: `--json`);
    nothing for a run that streamed only the clean records."""
    return ", ".join(dict.fromkeys(label.partition(":")[0] for label in labels))


def _stored_runs(url: str, migrate: bool) -> list[RunInfo]:
    """The store's runs, newest first. A SQLite file is read with the standard library
    alone (store/light.py), without SQLAlchemy's fifth of a second of imports."""
    from streameval.core.store.light import sqlite_runs
    from streameval.core.store.locations import sqlite_file

    path = sqlite_file(url)
    if path is not None and not migrate:
        return sqlite_runs(path, url)
    with _open_for_reading(url, migrate) as opened:
        return opened.list_runs()


def _open_for_reading(url: str, migrate: bool) -> Store:
    """The store, opened read-only (no Alembic, nothing written, so a store on read-only
    media lists), unless asked to migrate it: a store of an older streameval is refused in
    one line that says how."""
    from streameval.core.store.store import Store

    return Store(url, read_only=not migrate)


def _list_sessions(run_id: str, store: str | None, as_json: bool, migrate: bool) -> None:
    from streameval.core.store.light import StoreError

    try:
        with _open_for_reading(resolve_store_url(store, must_exist=True), migrate) as opened:
            sessions = opened.sessions(run_id)
    except StoreError as exc:
        raise fail(str(exc)) from None
    rows = [
        {
            "session_id": s.session_id, "status": s.status, "attempt": s.attempt,
            "host": s.host, "worker_id": s.worker_id, "gpu": (s.adapter or {}).get("gpu"),
            "endpoint": s.endpoint,
        }
        for s in sessions
    ]  # fmt: skip
    if as_json:
        print(json.dumps(rows))
        return
    # Every cell but the GPU's name is an identifier or one word: whole, never wrapped.
    columns = [Column(name.removesuffix("_id"), key=name != "gpu") for name in SESSION_COLUMNS]
    cells = []
    for row in rows:
        line = [Text("" if row[c] is None else str(row[c])) for c in SESSION_COLUMNS]
        line[1].stylize(STATUS_STYLES.get(row["status"], ""))
        cells.append(line)
    print_table(Console(), columns, cells)


def _identities(adapters: list[dict]) -> list[dict]:
    """Each adapter identity a run used, once, with the endpoints that served it."""
    identities: list[dict] = []
    for info in adapters:
        identity = adapter_identity(info)
        same = next((i for i in identities if adapter_identity(i) == identity), None)
        if same is None:
            same = {**identity, "endpoints": []}
            identities.append(same)
        endpoint = info.get("endpoint")
        if endpoint is not None and endpoint not in same["endpoints"]:
            same["endpoints"].append(endpoint)
    return identities


@runs_app.command("delete")
def runs_delete(
    run_ids: Annotated[list[str], typer.Argument(metavar="RUN_ID", help="The runs to delete.")],
    store: StoreOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Delete runs in progress too (their Core or workers hold a lease)."
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete runs from the store with their records, sessions and events, after asking.

    The frame cache stays (shared by every run here); the command says how to clear it."""
    from streameval.core.store.store import Store, StoreError

    try:
        with Store(resolve_store_url(store, must_exist=True)) as opened:
            to_delete = opened.runs_to_delete(run_ids, force=force)
            if not yes:
                _confirm_deletion(to_delete, opened.url)
            deleted = opened.delete_runs(run_ids, force=force)
    except StoreError as exc:
        raise fail(str(exc)) from None
    caches = {path: _folder_bytes(path) for path in _frame_caches(deleted.runs)}
    ids = [info.run_id for info in deleted.runs]
    if as_json:
        body = {
            "deleted": ids,
            "store": opened.url,
            "rows": deleted.rows,
            "frame_caches": [{"path": str(path), "bytes": size} for path, size in caches.items()],
        }
        print(json.dumps(body))
        return
    rows = deleted.rows
    console.print(
        f"deleted {len(ids)} run(s) ({', '.join(ids)}) from {opened.url}: "
        f"{rows['run_records']} records, {rows['sessions']} sessions, {rows['events']} events",
        highlight=False,
    )
    for path, size in caches.items():
        console.print(
            f"frame cache {path} ({size / 1e6:.1f} MB) left in place: its frames are shared "
            f"by every run on this machine; clear it with: rm -r {path}",
            highlight=False,
        )


def _confirm_deletion(runs: list[RunInfo], store_url: str) -> None:
    if not sys.stdin.isatty():
        raise fail("nobody can confirm the deletion (stdin is not a terminal): add --yes")
    names = ", ".join(info.run_id for info in runs)
    if not typer.confirm(f"Delete {len(runs)} run(s) ({names}) from {store_url}?", err=True):
        console.print("nothing deleted")
        raise typer.Exit(1)


def _frame_caches(runs: list[RunInfo]) -> list[Path]:
    """The frame caches these runs filled (runner.py keeps frames in CACHE_DIR/frames)."""
    folders = [
        Path(info.config.get("cache_dir") or default_cache_dir()) / "frames" for info in runs
    ]
    return [folder for folder in dict.fromkeys(folders) if folder.is_dir()]


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # a partial entry removed meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total

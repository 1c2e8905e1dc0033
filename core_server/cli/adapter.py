"""`streameval adapter ...`: serve an adapter, list the adapters, and list an adapter's
`-A` options.

Each command imports the registry when it runs: `streameval --help` builds the command tree
without it. Listing options imports the adapter's module, never its model stack (torch and
vLLM are imported by the model adapters' constructors).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from streameval.core.cli.common import fail
from streameval.terminal import Column, print_table

if TYPE_CHECKING:
    from streameval.adapters.options import OptionInfo

adapter_app = typer.Typer(
    help="Adapter services: serve one, list them, list an adapter's options.",
    no_args_is_help=True,
)

NameArgument = Annotated[
    str, typer.Argument(help="A name from `streameval adapter list`, or module:Class.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print a JSON list.")]

# A text default longer than this is cut at a word in the table (--json has it whole).
DEFAULT_SHOWN = 30


@adapter_app.command("serve")
def adapter_serve(
    name: NameArgument,
    host: str = "127.0.0.1",
    port: int = 8765,
    config: Annotated[
        str | None,
        typer.Option("--config", help="YAML file of adapter options, or a preset name."),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "-A",
            "--option",
            help="KEY=VALUE adapter option over --config (repeatable); "
            "`streameval adapter options NAME` lists the keys.",
        ),
    ] = None,
) -> None:
    """Serve an adapter as a WebSocket service (ws://HOST:PORT/ws, /healthz, /info).

    Its options: `streameval adapter options NAME`."""
    from streameval.adapters.__main__ import main as adapter_main

    argv = [name, "--host", host, "--port", str(port)]
    if config is not None:
        argv += ["--config", config]
    for item in option or []:
        argv += ["-A", item]
    adapter_main(argv)


@adapter_app.command("list")
def adapter_list(
    presets: Annotated[
        bool, typer.Option("--presets", help="List the packaged model presets instead.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """The adapters this installation can serve: name, kind and what each is.

    With --presets, each packaged model preset, the adapters it configures and its file."""
    if presets:
        _list_presets(as_json)
        return
    from streameval.adapters.registry import available_adapters

    entries = [entry for _, entry in sorted(available_adapters().items())]
    if as_json:
        print(json.dumps([dataclasses.asdict(entry) for entry in entries]))
        return
    columns = [
        Column("adapter", key=True),
        Column("kind", min_width=8),
        Column("what", min_width=30, paragraph=True),
    ]
    rows = [[entry.name, entry.kind, entry.description] for entry in entries]
    print_table(Console(), columns, rows)


def _list_presets(as_json: bool) -> None:
    from streameval.adapters.config import PRESET_DIR, preset_names
    from streameval.adapters.registry import preset_adapters

    listed = [
        {
            "preset": preset,
            "adapters": preset_adapters(preset),
            "file": f"{PRESET_DIR / preset}.yaml",
        }
        for preset in preset_names()
    ]
    if as_json:
        print(json.dumps(listed))
        return
    columns = [
        Column("preset", key=True),
        Column("adapters"),
        Column("file", key=True, paragraph=True),
    ]
    rows = [[p["preset"], ", ".join(p["adapters"]), p["file"]] for p in listed]
    print_table(Console(), columns, rows)


@adapter_app.command("options")
def adapter_options(name: NameArgument, as_json: JsonOption = False) -> None:
    """An adapter's options (-A KEY=VALUE, --config keys): type, default and meaning."""
    from streameval.adapters.errors import AdapterSetupError
    from streameval.adapters.options import describe_options
    from streameval.adapters.registry import adapter_class, config_model

    try:
        model = config_model(adapter_class(name))
    except AdapterSetupError as exc:
        raise fail(str(exc)) from None
    options = describe_options(model) if model is not None else []
    if as_json:
        print(json.dumps([dataclasses.asdict(option) for option in options]))
    elif not options:
        print(f"adapter {name!r} takes no options")
    else:
        _print_options(name, options)


def _print_options(name: str, options: list[OptionInfo]) -> None:
    columns = [
        Column("option", key=True),
        Column("type", min_width=10),
        Column("default", min_width=10),
        Column("meaning", min_width=24, paragraph=True),
    ]
    rows = [[o.key, o.type, _default_text(o), o.description] for o in options]
    title = f"Options of {name}: -A KEY=VALUE, or KEY: VALUE in a --config file."
    if any(row[2].endswith("…") for row in rows):
        title += " Defaults cut with … are whole in --json."
    print_table(Console(), columns, rows, title=title)


def _default_text(option: OptionInfo) -> str:
    """As it would be typed in YAML (JSON is YAML): `"WAIT"`, `null`, `[]`; a long text cut
    at a word."""
    if option.required:
        return "required"
    shown = json.dumps(option.default, ensure_ascii=False)
    if len(shown) <= DEFAULT_SHOWN:
        return shown
    cut = shown[:DEFAULT_SHOWN].rsplit(" ", 1)[0]
    return f"{cut}…"

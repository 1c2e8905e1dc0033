"""The help screens of the `streameval` command line.

Typer's own help shows a Python type beside every option, flags included (`--json <bool>`,
which reads as if the flag took a value), squeezes the help text into a narrow column,
keeps a docstring's line breaks and cuts what does not fit with an ellipsis. These screens
are plain text wrapped at the terminal's width (at most 100 columns), whole words only:
a flag stands alone, an option taking a value shows a value name (`--store TEXT`).

The root group (`HelpGroup`) gives every command of its tree the context whose help is
this one, so a command added anywhere below it gets these screens without a change, and
lists its own commands in panels.
"""

from __future__ import annotations

import inspect
import shutil
import textwrap
from pathlib import Path
from typing import Any, ClassVar, get_args, get_origin

import typer
from typer.core import TyperGroup

MAX_WIDTH = 100  # wider than this, lines of prose stop being easy to read
INDENT = 2
GAP = 2  # between an option and its help
LONGEST_TERM = 30  # a longer option gets its help on the lines below it
NBSP = "\u00a0"

_TYPE_NAMES = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH", bool: "BOOLEAN"}


class HelpContext(typer.Context):
    def get_help(self) -> str:
        return render_help(self.command, self)

    def get_usage(self) -> str:  # what a usage error shows above itself
        return "\n".join(_usage(self.command, self, _width()))

    @property
    def command_path(self) -> str:
        """`streameval runs delete`: the names only (Click's would add the arguments of the
        groups on the way: `streameval runs [run_id] delete`)."""
        parent = f"{self.parent.command_path} " if self.parent is not None else ""
        return parent + (self.info_name or "")


class HelpGroup(TyperGroup):
    """The root group: its commands listed in `panels`, in that order (any command not
    named there after them, under "Commands"), and these help screens everywhere below."""

    context_class = HelpContext
    # (title, command names) in the order shown.
    panels: ClassVar[tuple[tuple[str, tuple[str, ...]], ...]] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in _descendants(self):
            command.context_class = HelpContext

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return [name for _, names in self.command_panels(ctx) for name in names]

    def command_panels(self, ctx: typer.Context) -> list[tuple[str, list[str]]]:
        """(title, command names) of each panel with a command, in order."""
        listed = super().list_commands(ctx)
        panels = [(title, [n for n in names if n in listed]) for title, names in self.panels]
        placed = {name for _, names in panels for name in names}
        panels.append(("Commands", [name for name in listed if name not in placed]))
        return [(title, names) for title, names in panels if names]


def _descendants(group: Any) -> list[Any]:
    found = []
    for command in getattr(group, "commands", {}).values():
        found += [command, *_descendants(command)]
    return found


def render_help(command: Any, ctx: typer.Context) -> str:
    width = _width()
    lines = _usage(command, ctx, width)
    for paragraph in _paragraphs(command.help or ""):
        lines += ["", *_wrap(paragraph, width)]
    visible = [p for p in command.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [(_argument_name(p), _param_help(p)) for p in visible if _is_argument(p)]
    options = [(_option_term(p), _param_help(p)) for p in visible if not _is_argument(p)]
    sections = [("Arguments", arguments), ("Options", options)]
    if isinstance(command, HelpGroup):
        sections += [(t, _command_rows(command, ctx, n)) for t, n in command.command_panels(ctx)]
    elif hasattr(command, "commands"):
        sections.append(("Commands", _command_rows(command, ctx, command.list_commands(ctx))))
    terms = [term for _, rows in sections for term, _ in rows]
    term_width = min(max(map(len, terms), default=0), LONGEST_TERM, width // 3)
    for title, rows in sections:
        if rows:
            lines += ["", f"{title}:", *_definitions(rows, term_width, width)]
    return "\n".join(lines)


def _width() -> int:
    return max(40, min(shutil.get_terminal_size().columns, MAX_WIDTH))


def _usage(command: Any, ctx: typer.Context, width: int) -> list[str]:
    usage = " ".join([ctx.command_path, *_usage_pieces(command)])
    return _wrap(f"Usage: {usage}", width, 4)


def _usage_pieces(command: Any) -> list[str]:
    pieces = [command.options_metavar] if command.options_metavar else []
    for param in command.params:
        if _is_argument(param):
            name = _argument_name(param)
            pieces.append(name if param.required else f"[{name}]")
    subcommands = getattr(command, "subcommand_metavar", None)
    return [*pieces, subcommands] if subcommands else pieces


def _is_argument(param: Any) -> bool:
    return param.param_type_name == "argument"


def _argument_name(param: Any) -> str:
    name = param.metavar or param.name.upper()
    return f"{name}..." if param.nargs != 1 else name


def _option_term(param: Any) -> str:
    # Short forms first: `-o, --output PATH`.
    term = ", ".join(sorted(param.opts, key=lambda opt: opt.startswith("--")))
    if param.secondary_opts:
        term += " / " + ", ".join(param.secondary_opts)
    is_flag = getattr(param, "is_flag", False) or getattr(param, "count", False)
    return term if is_flag else f"{term} {_value_name(param)}"


def _value_name(param: Any) -> str:
    if param.metavar:
        return param.metavar
    descriptor = getattr(param, "type_descriptor", None)  # Typer's own type (Typer >= 0.20)
    if descriptor is None:  # an earlier Typer: Click's type
        return param.type.name.upper()
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        (annotation,) = get_args(annotation)
    return _TYPE_NAMES.get(annotation, "VALUE")


def _param_help(param: Any) -> str:
    extras = []
    if param.envvar and getattr(param, "show_envvar", False):
        extras.append(f"[env var: {param.envvar}]")
    default = _default_text(param)
    if default:
        extras.append(f"[default: {default}]")
    least, most = getattr(param, "min", None), getattr(param, "max", None)  # Typer's bounds
    if least is not None:
        extras.append(f"[at least {least}]" if most is None else f"[{least} to {most}]")
    elif most is not None:
        extras.append(f"[at most {most}]")
    if param.required:
        extras.append("[required]")
    # Each extra kept on one line: `_wrap` breaks at no non-breaking space.
    return " ".join([*_paragraphs(param.help or ""), *(e.replace(" ", NBSP) for e in extras)])


def _default_text(param: Any) -> str:
    shown = getattr(param, "show_default", False)
    if isinstance(shown, str):
        return shown
    flag = getattr(param, "is_flag", False)
    default = param.default
    if not shown or flag or default is None or callable(default) or default == []:
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(map(str, default))
    return str(getattr(default, "value", default))  # an Enum by its value


def _command_rows(group: Any, ctx: typer.Context, names: list[str]) -> list[tuple[str, str]]:
    rows = []
    for name in names:
        command = group.get_command(ctx, name)
        if command is not None and not command.hidden:
            summary = _paragraphs(command.short_help or command.help or "")
            rows.append((name, summary[0] if summary else ""))
    return rows


def _paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs, each on one line: its line breaks only fit the source."""
    blocks = inspect.cleandoc(text).split("\n\n")
    return [" ".join(block.split()) for block in blocks if block.strip()]


def _definitions(rows: list[tuple[str, str]], term_width: int, width: int) -> list[str]:
    """Each term with its text beside it, wrapped; a term wider than `term_width` on a line
    of its own, its text below."""
    column = INDENT + term_width + GAP
    lines = []
    for term, text in rows:
        wrapped = _wrap(text, width - column)
        if len(term) <= term_width and wrapped:
            lines.append(f"{' ' * INDENT}{term:<{term_width}}{' ' * GAP}{wrapped[0]}")
            wrapped = wrapped[1:]
        else:
            lines.append(f"{' ' * INDENT}{term}")
        lines += [" " * column + line for line in wrapped]
    return lines


def _wrap(text: str, width: int, indent: int = 0) -> list[str]:
    """Whole words only: a word longer than the width stands alone on its line."""
    wrapped = textwrap.wrap(
        text,
        width,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [line.replace(NBSP, " ") for line in wrapped]

"""Tables that fit the terminal and never cut an identifier.

`print_table` prints a rich table when its identifier columns (run ids, metric and profile
names, paths) fit whole beside the other columns at their narrowest readable width; rich
then wraps those others between words. Otherwise each row becomes a block: its first cell
on a line of its own, the other cells under it as `header value` pairs, wrapped and
indented. A plain string among the rows is a heading that starts a group in either layout.

    print_table(console, [Column("run", key=True), Column("status")], [["667125eb9b78", "ok"]])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

Cell = str | Text
Row = Sequence[Cell]
_PADDING = 1  # right of each cell


@dataclass(frozen=True)
class Column:
    header: str
    key: bool = False  # an identifier: printed whole, on one line, in both layouts
    justify: Literal["left", "right"] = "left"
    # Narrower than this the column would not read well: the rows become blocks instead.
    min_width: int | None = None
    paragraph: bool = False  # in a block: a paragraph of its own rather than a pair


def print_table(
    console: Console, columns: Sequence[Column], rows: Sequence[Row | str], title: str = ""
) -> None:
    """Print the rows as a table if it fits the console's width, else as blocks."""
    if title:
        console.print(title, highlight=False)
    if _narrowest(columns, rows) <= console.width:
        console.print(_table(columns, rows, console.width))
    else:
        console.print(_blocks(columns, rows))


def _text(cell: Cell) -> Text:
    return cell.copy() if isinstance(cell, Text) else Text(cell)


def _one_line(cell: Cell) -> Text:
    """A cell of several lines (one adapter a line) as one line, for a pair."""
    text = _text(cell)
    if "\n" not in text.plain:
        return text
    return Text("; ".join(text.plain.split("\n")), style=text.style)


def _widest_line(cell: Cell) -> int:
    return max(cell_len(line) for line in str(cell).split("\n"))


def _cells(position: int, rows: Sequence[Row | str]) -> list[Cell]:
    """A column's cells; the first column's include the headings, which sit there."""
    cells = [row[position] for row in rows if not isinstance(row, str)]
    if position == 0:
        cells += [row for row in rows if isinstance(row, str)]
    return cells


def _needs(columns: Sequence[Column], rows: Sequence[Row | str]) -> list[int]:
    """The narrowest each column prints with every identifier whole and no other word cut:
    its widest identifier, or its longest word or min_width."""
    needs = []
    for position, column in enumerate(columns):
        cells = [str(cell) for cell in _cells(position, rows)] + [column.header]
        if column.key:
            needs.append(max(_widest_line(cell) for cell in cells))
        else:
            words = [word for cell in cells for word in cell.split()]
            needs.append(max([cell_len(word) for word in words] + [column.min_width or 1]))
    return needs


def _narrowest(columns: Sequence[Column], rows: Sequence[Row | str]) -> int:
    """The narrowest the table can print: each column at its need plus its padding, plus
    one divider between columns."""
    return sum(_needs(columns, rows)) + len(columns) * (_PADDING + 1) - 1


def _widths(columns: Sequence[Column], rows: Sequence[Row | str], room: int) -> list[int]:
    """Column widths that fill at most `room`: the widest column narrowed first, none below
    its need. (rich narrows the widest columns below their longest word, then crops.)"""
    needs = _needs(columns, rows)
    widths = [
        max([_widest_line(cell) for cell in _cells(position, rows)] + [cell_len(column.header)])
        for position, column in enumerate(columns)
    ]
    widths = [max(width, need) for width, need in zip(widths, needs, strict=True)]
    room -= len(columns) * (_PADDING + 1) - 1
    while sum(widths) > room:
        narrowable = [k for k, width in enumerate(widths) if width > needs[k]]
        widths[max(narrowable, key=lambda k: widths[k])] -= 1
    return widths


def _table(columns: Sequence[Column], rows: Sequence[Row | str], room: int) -> Table:
    # Two spaces between columns: the divider and one space of padding.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, _PADDING, 0, 0))
    for column, width in zip(columns, _widths(columns, rows, room), strict=True):
        table.add_column(column.header, justify=column.justify, no_wrap=column.key, width=width)
    for row in rows:
        if isinstance(row, str):
            if table.row_count:
                table.add_section()
            table.add_row(Text(row, style="bold"))
        else:
            table.add_row(*(_text(cell) for cell in row))
    return table


def _blocks(columns: Sequence[Column], rows: Sequence[Row | str]) -> Group:
    indent = 2 if any(isinstance(row, str) for row in rows) else 0
    parts: list[RenderableType] = []
    for row in rows:
        if isinstance(row, str):
            parts.append(Text(row, style="bold"))
            continue
        parts.append(Padding(_text(row[0]), (0, 0, 0, indent), expand=False))
        pairs = Text()
        for column, cell in zip(columns[1:], row[1:], strict=True):
            text = _one_line(cell)
            if not text.plain or column.paragraph:
                continue
            if pairs:
                pairs.append(" · ")
            pairs.append(f"{column.header} ", style="dim")
            pairs.append(text)
        if pairs:
            parts.append(Padding(pairs, (0, 0, 0, indent + 2), expand=False))
        parts += [
            Padding(_text(cell), (0, 0, 0, indent + 2), expand=False)
            for column, cell in zip(columns[1:], row[1:], strict=True)
            if column.paragraph and str(cell)
        ]
    return Group(*parts)

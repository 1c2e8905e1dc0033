"""The four texts of a paper table (scorer/paper_table.py): Markdown and LaTeX for the page,
CSV and JSON for programs. Markdown and LaTeX show each value as every console table does
(four significant digits), the best of a column in bold; CSV and JSON carry the values
whole and the mark as a flag.

Markdown and LaTeX lay the table out alike: the header says the scoring profile and n;
columns run, adapter (model), the group under `--by`, n, then one per metric, named
`family.metric (unit)` with an arrow for the direction that is better; notes follow.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

from streameval.scorer.report import format_ci, format_value
from streameval.scorer.table_model import PaperTable, TableCell, TableColumn

_ARROWS = {"higher": ("↑", r"$\uparrow$"), "lower": ("↓", r"$\downarrow$"), None: ("", "")}
_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _key_headers(table: PaperTable) -> list[str]:
    """The header cells before the metrics."""
    group = [] if table.by is None else [table.by.replace("_", " ")]
    return ["run", "adapter (model)", *group, "n"]


def _key_cells(table: PaperTable) -> list[list[str]]:
    return [
        [row.run_id, row.label, *([] if table.by is None else [row.group or ""]), str(row.n)]
        for row in table.rows
    ]


def _metric_header(column: TableColumn, latex: bool) -> str:
    arrow = _ARROWS[column.better][1 if latex else 0]
    name = f"{column.key} ({column.unit})" if column.unit else column.key
    name = latex_escape(name) if latex else name
    return f"{name} {arrow}" if arrow else name


def _value_text(cell: TableCell, latex: bool) -> str:
    value = format_value(cell.value)
    if latex and cell.value is None:
        value = "--"
    if cell.best:
        value = rf"\textbf{{{value}}}" if latex else f"**{value}**"
    if cell.ci95 is None:
        return value
    interval = format_ci(cell.ci95)
    return rf"{value} {{\scriptsize {interval}}}" if latex else f"{value} {interval}"


def markdown(table: PaperTable) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", r"\|") for cell in cells) + " |"

    keys = _key_headers(table)
    header = keys + [_metric_header(column, latex=False) for column in table.columns]
    align = ["---"] * (len(keys) - 1) + ["--:"] * (1 + len(table.columns))
    body = [
        line(cells + [_value_text(cell, latex=False) for cell in row.cells])
        for cells, row in zip(_key_cells(table), table.rows, strict=True)
    ]
    lines = [" · ".join(table.caption_parts()) + ".", "", line(header), line(align), *body]
    lines += [""] + [f"Note: {note}" for note in table.notes] if table.notes else []
    return "\n".join(lines) + "\n"


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(char, char) for char in text)


def latex(table: PaperTable) -> str:
    """A `table` float around a `tabular` that needs no package; notes as comments."""
    keys = _key_headers(table)
    spec = "l" * (len(keys) - 1) + "r" * (1 + len(table.columns))
    header = [latex_escape(cell) for cell in keys[:-1]] + ["$n$"]
    header += [_metric_header(column, latex=True) for column in table.columns]
    lines = [
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{latex_escape('; '.join(table.caption_parts()))}.}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\hline",
        " & ".join(header) + r" \\",
        r"\hline",
    ]
    group = None
    for cells, row in zip(_key_cells(table), table.rows, strict=True):
        if table.by is not None and group not in (None, row.group):
            lines.append(r"\hline")
        group = row.group
        values = [latex_escape(cell) for cell in cells]
        values += [_value_text(cell, latex=True) for cell in row.cells]
        lines.append(" & ".join(values) + r" \\")
    lines += [r"\hline", r"\end{tabular}", r"\end{table}"]
    lines += [f"% note: {note}" for note in table.notes]
    return "\n".join(lines) + "\n"


def _csv_number(value: float | None) -> str:
    return "" if value is None else repr(value)


def csv_text(table: PaperTable) -> str:
    """One line per row: the keys, the profile, then per metric its value, its best flag
    and, with intervals, the interval's bounds (empty: none)."""
    header = ["run_id", "adapter", *([] if table.by is None else [table.by]), "n", "profile"]
    for column in table.columns:
        header += [column.key, f"{column.key}_best"]
        header += [f"{column.key}_ci_low", f"{column.key}_ci_high"] if table.intervals else []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    profile = f"{table.profile} v{table.profile_version}"
    for cells, row in zip(_key_cells(table), table.rows, strict=True):
        line = [*cells, profile]
        for cell in row.cells:
            line += [_csv_number(cell.value), "true" if cell.best else "false"]
            if table.intervals:
                low, high = cell.ci95 or (None, None)
                line += [_csv_number(low), _csv_number(high)]
        writer.writerow(line)
    return out.getvalue()


def json_text(table: PaperTable) -> str:
    return table.model_dump_json(indent=2) + "\n"


RENDERERS: dict[str, Callable[[PaperTable], str]] = {
    "markdown": markdown,
    "latex": latex,
    "csv": csv_text,
    "json": json_text,
}

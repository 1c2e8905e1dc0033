"""`streameval table` and scorer/paper_table.py on real runs (tests/table_runs.py): the same
numbers in Markdown, LaTeX, CSV and JSON, each equal to what `score_run` reports; the best
value of each column marked the way the metric improves; blocks per task type; one-line
errors."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from streameval.cli import app
from streameval.core.store.store import Store
from streameval.scorer.metrics.explain import explain, family_glossary
from streameval.scorer.paper_table import PaperTable, paper_table, render_table, table_columns
from streameval.scorer.profiles import get_profile
from streameval.scorer.report import format_value, score_run
from streameval.scorer.service.api import create_app
from streameval.scorer.table_formats import latex_escape
from tests.table_runs import table_runs

runner = CliRunner()
METRICS = [
    "qa.accuracy",
    "proactive.in_window_accuracy",
    "proactive.false_alarm_rate",
    "qa.invalid_output_rate",
    "workload.submitted_images",
]
LABELS = [
    "reference (reference-pixel-policy)",
    "always (baseline-always)",
    "first-option-reference (first-option)",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    env = {"STREAMEVAL_CACHE_DIR": str(tmp_path_factory.getbasetemp() / "streameval-cache")}
    url = f"sqlite:///{tmp_path_factory.mktemp('table') / 'store.db'}"
    yield url, table_runs(url, {**os.environ, **env})


def table(url: str, run_ids: list[str], **options) -> PaperTable:
    with Store(url, read_only=True) as store:
        return paper_table(store, run_ids, **options)


# --------------------------------------------------------------------------- parsing


def markdown_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The header cells and the body's cells of the Markdown table in `text`."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    header, align, *body = rows
    assert all(re.fullmatch(r"-{3}|-{2}:", cell) for cell in align), align
    assert all(len(row) == len(header) for row in body)
    return header, body


_VALUE = re.compile(
    r"(?:\*\*(?P<bold>[^*]+)\*\*|(?P<plain>[^*\s\[]+))(?: \[(?P<low>[^,]+), (?P<high>[^\]]+)\])?"
)


def read_value(cell: str) -> tuple[str, bool, tuple[str, str] | None]:
    """A Markdown metric cell: its value text, whether it is bold, its interval's texts."""
    found = _VALUE.fullmatch(cell)
    assert found is not None, cell
    interval = None if found["low"] is None else (found["low"], found["high"])
    return found["bold"] or found["plain"], found["bold"] is not None, interval


def latex_as_markdown(cell: str) -> str:
    """A LaTeX cell written as the Markdown one is: the same text, marks and interval."""
    cell = re.sub(r"\\textbf\{([^}]*)\}", r"**\1**", cell)
    cell = re.sub(r"\{\\scriptsize (\[[^\]]*\])\}", r"\1", cell)
    cell = re.sub(r"\\([_%&#${}])", r"\1", cell)
    return "-" if cell == "--" else cell


def latex_rows(text: str) -> tuple[str, list[list[str]]]:
    """Checks the LaTeX as text (no TeX needed): braces balance, one tabular whose every
    line has as many cells as its column spec has columns and ends with \\\\, and no special
    character left unescaped; returns the spec and the rows' cells (header first)."""
    depth = 0
    for token in re.findall(r"\\[{}]|[{}]", text):
        if token in ("{", "}"):
            depth += 1 if token == "{" else -1
            assert depth >= 0, text
    assert depth == 0
    assert text.count(r"\begin{tabular}") == text.count(r"\end{tabular}") == 1
    (spec,) = re.findall(r"\\begin\{tabular\}\{([lrc]+)\}", text)
    inside = text.split(r"\begin{tabular}")[1].split(r"\end{tabular}")[0].splitlines()[1:]
    rows = []
    for line in inside:
        if line == r"\hline":
            continue
        assert line.endswith(r" \\"), line
        cells = re.split(r"(?<!\\)&", line[: -len(r" \\")])
        assert len(cells) == len(spec), line
        rows.append([cell.strip() for cell in cells])
    tex = "\n".join(line for line in text.splitlines() if not line.startswith("%"))
    tex = re.sub(r"\$(\\uparrow|\\downarrow|n)\$", "", tex)
    assert not re.search(r"(?<!\\)[_%#$]", tex), tex
    assert len(re.findall(r"(?<!\\)&", tex)) == (len(spec) - 1) * len(rows)
    return spec, rows


def compile_if_possible(text: str, folder: Path) -> None:
    """Where pdflatex is installed, the table also compiles in a plain article."""
    if shutil.which("pdflatex") is None:
        return
    source = folder / "table.tex"
    source.write_text(f"\\documentclass{{article}}\n\\begin{{document}}\n{text}\\end{{document}}\n")
    done = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", source.name],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:]


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("by", [None, "task_type"])
def test_the_four_formats_render_the_same_numbers(runs, by, tmp_path: Path) -> None:
    url, run_ids = runs
    made = table(url, run_ids, metrics=METRICS, by=by, intervals=True)
    data = json.loads(render_table(made, "json"))
    assert PaperTable.model_validate(data) == made
    keys = 3 if by is None else 4  # run, adapter (model), [task type], n

    header, body = markdown_table(render_table(made, "markdown"))
    assert header[:keys] == ["run", "adapter (model)", *(["task type"] if by else []), "n"]
    assert header[keys:] == [
        "qa.accuracy (0-1) ↑",
        "proactive.in_window_accuracy (0-1) ↑",
        "proactive.false_alarm_rate (0-1) ↓",
        "qa.invalid_output_rate (0-1) ↓",
        "workload.submitted_images (count)",
    ]
    assert len(body) == len(data["rows"])
    for cells, row in zip(body, data["rows"], strict=True):
        assert cells[:keys] == [
            row["run_id"],
            row["label"],
            *([row["group"]] if by else []),
            str(row["n"]),
        ]
        for text, cell in zip(cells[keys:], row["cells"], strict=True):
            interval = cell["ci95"] and tuple(format_value(bound) for bound in cell["ci95"])
            assert read_value(text) == (format_value(cell["value"]), cell["best"], interval)

    spec, latex = latex_rows(render_table(made, "latex"))
    assert spec == "l" * (keys - 1) + "r" * (1 + len(METRICS))
    assert [latex_as_markdown(cell) for cell in latex[0][: keys - 1]] == header[: keys - 1]
    assert [[latex_as_markdown(cell) for cell in row] for row in latex[1:]] == body
    compile_if_possible(render_table(made, "latex"), tmp_path)

    lines = list(csv.DictReader(io.StringIO(render_table(made, "csv"))))
    assert len(lines) == len(data["rows"])
    for line, row in zip(lines, data["rows"], strict=True):
        assert (line["run_id"], line["adapter"], line["n"]) == (
            row["run_id"],
            row["label"],
            str(row["n"]),
        )
        assert line["profile"] == "trace-paper-v1 v3"
        for column, cell in zip(data["columns"], row["cells"], strict=True):
            key = column["key"]
            value = None if line[key] == "" else float(line[key])
            assert (value, line[f"{key}_best"]) == (cell["value"], str(cell["best"]).lower())
            bounds = [line[f"{key}_ci_low"], line[f"{key}_ci_high"]]
            assert (cell["ci95"] or ["", ""]) == [float(b) if b else "" for b in bounds]


def test_each_cell_is_the_runs_score_and_the_best_is_marked_as_the_metric_improves(
    runs,
) -> None:
    url, run_ids = runs
    made = table(url, run_ids, metrics=METRICS, intervals=True)
    assert [(row.run_id, row.label, row.n) for row in made.rows] == [
        (run_id, label, 20) for run_id, label in zip(run_ids, LABELS, strict=True)
    ]
    assert (made.profile, made.profile_version, made.n) == ("trace-paper-v1", "3", 20)
    with Store(url, read_only=True) as store:
        for row in made.rows:
            overall = score_run(store, row.run_id).overall
            for column, cell in zip(made.columns, row.cells, strict=True):
                metric = overall.get(column.family, {}).get(column.metric)
                expected = (None, None) if metric is None else (metric.value, metric.ci95)
                assert (cell.value, cell.ci95) == expected
    values = {c.key: [row.cells[i].value for row in made.rows] for i, c in enumerate(made.columns)}
    best = {c.key: [row.cells[i].best for row in made.rows] for i, c in enumerate(made.columns)}
    # Higher is better: the reference answers every question right, the others 1 in 16.
    assert values["qa.accuracy"] == [1.0, 0.0625, 0.0625]
    assert best["qa.accuracy"] == [True, False, False]
    assert values["proactive.in_window_accuracy"] == [1.0, 0.0, 1.0]
    assert best["proactive.in_window_accuracy"] == [True, False, True]  # ties: both marked
    # Lower is better: `always` speaks at every step, 66 of its 134 answers outside a window.
    assert values["proactive.false_alarm_rate"] == [0.0, 66 / 134, 0.0]
    assert best["proactive.false_alarm_rate"] == [True, False, True]
    # A count of work done has no better direction: nothing is marked; `always` reports none.
    assert values["workload.submitted_images"] == [370.0, None, 370.0]
    assert best["workload.submitted_images"] == [False, False, False]


def test_by_task_type_gives_a_block_of_rows_per_task_type_each_marked_on_its_own(runs) -> None:
    url, run_ids = runs
    made = table(url, run_ids, metrics=["accuracy", "miss_rate"], by="task_type")
    assert made.n is None and "n per row" in render_table(made, "markdown")
    blocks: dict[str, list] = {}
    for row in made.rows:
        blocks.setdefault(row.group, []).append(row)
    assert {group: rows[0].n for group, rows in blocks.items()} == {
        "color_state": 2,
        "count_change": 2,
        "past_digit": 4,
        "present_color": 6,
        "present_count": 2,
        "present_digit": 1,
        "unanswerable": 3,
    }
    assert all([row.run_id for row in rows] == run_ids for rows in blocks.values())
    accuracy = {
        g: [(r.cells[0].value, r.cells[0].best) for r in rows] for g, rows in blocks.items()
    }
    assert accuracy["past_digit"] == [(1.0, True), (0.25, False), (0.25, False)]
    assert accuracy["present_color"] == [(1.0, True), (0.0, False), (0.0, False)]
    # QA task types have no proactive metric: no value, nothing marked.
    assert [(r.cells[1].value, r.cells[1].best) for r in blocks["past_digit"]] == [
        (None, False)
    ] * 3
    assert [(r.cells[1].value, r.cells[1].best) for r in blocks["color_state"]] == [(0.0, True)] * 3


def test_one_run_has_no_best_and_each_profile_has_its_headline_columns(runs) -> None:
    url, run_ids = runs
    single = table(url, run_ids[:1])
    assert [column.key for column in single.columns] == [
        "qa.accuracy",
        "proactive.in_window_accuracy",
    ]
    assert [cell.best for cell in single.rows[0].cells] == [False, False]
    assert "**" not in render_table(single, "markdown")
    headlines = {
        name: [column.key for column in table_columns(get_profile(name), None)]
        for name in ("trace-paper-v1", "realstream", "readiness", "ovo-offline", "streamingbench")
    }
    assert headlines == {
        "trace-paper-v1": ["qa.accuracy", "proactive.in_window_accuracy"],
        "realstream": ["qa.accuracy", "proactive.in_window_accuracy", "realstream.score"],
        "readiness": ["qa.accuracy", "proactive.in_window_accuracy", "readiness.acc_e"],
        "ovo-offline": ["ovo.total"],
        "streamingbench": ["streamingbench.accuracy"],
    }


def test_every_metric_that_says_which_way_is_better_has_that_direction() -> None:
    directions = {
        "qa.accuracy": "higher",
        "qa.latency_s_p95": "lower",
        "qa.invalid_output_rate": "lower",
        "proactive.miss_rate": "lower",
        "proactive.false_alarm_rate": "lower",
        "proactive.median_response_delay_video_s": "lower",
        "realstream.score": "higher",
        "readiness.early_penalty": "higher",
        "ovo.total": "higher",
        "streamingbench.excluded_answers": "lower",
        "workload.submitted_images": None,
        "realstream.answer_rate": None,
        "readiness.evidence_coverage": None,
    }
    assert {name: explain(name).better for name in directions} == directions
    for helps in family_glossary().values():
        for help in helps:
            said = [d for d in ("higher", "lower") if f"{d} is better" in help.scale]
            assert [help.better] == (said or [None])


def test_latex_escapes_what_tex_reads_as_commands() -> None:
    assert latex_escape("run_1 & 50% {x} #2 $") == r"run\_1 \& 50\% \{x\} \#2 \$"


def test_the_command_prints_the_functions_text(runs) -> None:
    url, run_ids = runs
    arguments = ["table", *run_ids, "--metrics", "qa.accuracy,false_alarm_rate"]
    for fmt in ("markdown", "latex", "csv", "json"):
        shown = runner.invoke(app, [*arguments, "--format", fmt, "--intervals", "--store", url])
        assert shown.exit_code == 0, shown.output
        made = table(url, run_ids, metrics=["qa.accuracy", "false_alarm_rate"], intervals=True)
        assert shown.stdout == render_table(made, fmt)
    by_type = runner.invoke(app, [*arguments, "--by", "task_type", "--store", url])
    assert by_type.stdout == render_table(
        table(url, run_ids, metrics=["qa.accuracy", "false_alarm_rate"], by="task_type"),
        "markdown",
    )
    other = runner.invoke(app, ["table", run_ids[0], "--profile", "ovo-offline", "--store", url])
    assert "scoring profile ovo-offline v2" in other.stdout
    assert "| ovo.total (%) ↑ |" in other.stdout


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["nope"], "unknown run id 'nope'"),
        (["--metrics", "bogus"], "profile trace-paper-v1 reports no metric 'bogus'; it reports:"),
        (
            ["--metrics", "accuracy", "--profile", "readiness"],
            "metric 'accuracy' is reported by several families: name one of qa.accuracy, "
            "readiness.accuracy",
        ),
        (["--by", "video"], "--by takes task_type or source_benchmark, not 'video'"),
        (["--format", "docx"], "--format takes markdown, latex, csv, json, not 'docx'"),
        (["--profile", "paper"], "unknown scoring profile 'paper'"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(runs, arguments: list[str], message: str) -> None:
    url, run_ids = runs
    result = runner.invoke(app, ["table", run_ids[0], *arguments, "--store", url])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output and result.stdout == ""


def test_the_results_api_serves_the_functions_text(runs) -> None:
    url, run_ids = runs
    with TestClient(create_app(url)) as client:
        for fmt in ("markdown", "latex", "csv", "json"):
            params = {"runs": ",".join(run_ids), "format": fmt, "intervals": True}
            answer = client.get("/table", params={**params, "by": "task_type"})
            assert answer.status_code == 200, answer.text
            made = table(url, run_ids, by="task_type", intervals=True)
            assert answer.json()["text"] == render_table(made, fmt)
            assert PaperTable.model_validate(answer.json()["table"]) == made
        chosen = {"runs": run_ids[1], "metrics": "false_alarm_rate", "profile": "trace-strict"}
        answer = client.get("/table", params=chosen).json()
        strict = table(
            url, run_ids[1:2], metrics=["false_alarm_rate"], scoring_profile="trace-strict"
        )
        assert answer["text"] == render_table(strict, "markdown")
        refused = {
            (("runs", "nope"),): (404, "unknown run id 'nope'"),
            (("runs", run_ids[0]), ("metrics", "bogus")): (422, "reports no metric 'bogus'"),
            (("runs", run_ids[0]), ("by", "video")): (422, "--by takes task_type or"),
            (("runs", run_ids[0]), ("profile", "paper")): (400, "unknown scoring profile"),
        }
        for params, (status, message) in refused.items():
            answer = client.get("/table", params=dict(params))
            assert (answer.status_code, message in answer.json()["detail"]) == (status, True)

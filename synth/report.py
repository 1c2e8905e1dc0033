"""`<out>/report.html`: a synth summary (summary.json's data) as one self-contained page.

No script and nothing fetched: inline CSS, tables, and bars drawn as CSS widths. Every text
from the data (video paths, drop details) is HTML-escaped, so a file name cannot inject
markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from streameval.synth.taxonomy import CATEGORIES

TITLE = "streameval synth: dataset summary"
REASON_LABELS = {
    "no_relevant_segment": "no relevant segment",
    "malformed": "malformed",
    "temporally_inconsistent": "temporally inconsistent",
    "duplicate": "duplicate",
}
STATS_ROWS = (
    ("video_duration_s", "video duration (s)"),
    ("trajectory_duration_s", "trajectory duration (s)"),
    ("trajectory_steps", "steps per trajectory"),
)
STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; color: #1d2329; margin: 24px; }
h1 { font-size: 20px; }
h2 { font-size: 16px; margin-top: 24px; border-bottom: 1px solid #d8dde2; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #d8dde2; padding: 4px 10px; text-align: left; }
.bar { display: inline-block; width: 200px; height: 10px; background: #f5f7f9; }
.bar span { display: block; height: 100%; background: #1f5f99; }
code { font-size: 12px; }
"""


def write_report(summary: dict[str, Any], path: Path) -> None:
    path.write_text(render_report(summary), encoding="utf-8")


def render_report(summary: dict[str, Any]) -> str:
    sections = [
        _dataset_section(summary["dataset"], summary["refused"]),
        _videos_section(summary["videos"]),
        _categories_section(summary["categories"], summary["videos"]["kept"]),
        _actions_section(summary["actions"]),
        _durations_section(summary),
        _questions_section(summary["questions"]),
        _dropped_section(summary["dropped"]),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{TITLE}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{TITLE}</h1>\n" + "\n".join(sections) + "\n</body>\n</html>\n"
    )


def _dataset_section(dataset: dict[str, Any] | None, refused: str | None) -> str:
    if dataset is None:
        return (
            '<h2 id="dataset">Dataset</h2>\n'
            f"<p><strong>Refused, not written:</strong> {escape(refused or '')}.</p>"
        )
    rows = [
        ("file", f"<code>{escape(dataset['path'])}</code>"),
        ("sha256", f"<code>{escape(dataset['sha256'])}</code>"),
        ("conversations (one per video)", _number(dataset["rows"])),
        ("steps (assistant turns)", _number(dataset["steps"])),
        ("images", _number(dataset["images"])),
    ]
    return '<h2 id="dataset">Dataset</h2>\n' + _table(("", "value"), rows)


def _videos_section(videos: dict[str, Any]) -> str:
    received = videos["received"]
    rows = [
        ("received", _number(received), ""),
        ("kept", _number(videos["kept"]), _bar(videos["kept"], received)),
        *(
            (f"dropped: {REASON_LABELS[reason]}", _number(count), _bar(count, received))
            for reason, count in videos["dropped_by_reason"].items()
        ),
    ]
    return '<h2 id="videos">Videos</h2>\n' + _table(("videos", "count", "share"), rows)


def _categories_section(categories: dict[str, int], kept: int) -> str:
    rows = [
        (f"{escape(code)} ({CATEGORIES[code].name})", _number(count), _bar(count, kept))
        for code, count in categories.items()
    ]
    return '<h2 id="categories">Categories (kept videos)</h2>\n' + _table(
        ("category", "videos", "share"), rows
    )


def _actions_section(actions: dict[str, Any]) -> str:
    steps = actions["steps"]
    rows = [
        ("Silent", _number(actions["silent"]), _bar(actions["silent"], steps)),
        ("respond", _number(actions["respond"]), _bar(actions["respond"], steps)),
        ("all", _number(steps), ""),
    ]
    share = actions["silent_share"]
    bounds = (
        f"(bounds {actions['silent_share_min'] * 100:g}% to {actions['silent_share_max'] * 100:g}%)"
    )
    shown = "–" if share is None else f"{share * 100:.1f}%"
    per_trajectory = [
        ("Silent share per trajectory", *_stats_cells(actions["silent_share_per_trajectory"]))
    ]
    return (
        '<h2 id="actions">Actions</h2>\n'
        f"<p>Silent share: {shown} {bounds}</p>\n"
        + _table(("action", "steps", "share"), rows)
        + _table(("", "count", "total", "mean", "min", "max"), per_trajectory)
    )


def _durations_section(summary: dict[str, Any]) -> str:
    rows = [(label, *_stats_cells(summary[key])) for key, label in STATS_ROWS]
    headers = ("", "count", "total", "mean", "min", "max")
    return '<h2 id="durations">Durations</h2>\n' + _table(headers, rows)


def _questions_section(questions: dict[str, Any]) -> str:
    asked = questions["asked"]
    counts = [
        ("generated", _number(questions["generated"])),
        ("asked (with a relevant segment)", _number(asked)),
    ]
    per_question = [
        ("responses per asked question", *_stats_cells(questions["responses_per_question"]))
    ]
    histogram = [
        (_number(int(responses)), _number(count), _bar(count, asked))
        for responses, count in questions["responses_histogram"].items()
    ]
    return (
        '<h2 id="questions">Questions</h2>\n'
        + _table(("questions", "count"), counts)
        + _table(("", "count", "total", "mean", "min", "max"), per_question)
        + _table(("responses", "questions", "share"), histogram)
    )


def _dropped_section(dropped: Sequence[dict[str, str]]) -> str:
    rows = [
        (
            f"<code>{escape(entry['video'])}</code>",
            REASON_LABELS[entry["reason"]],
            escape(entry["detail"]),
        )
        for entry in dropped
    ]
    if not rows:
        return '<h2 id="dropped">Dropped videos</h2>\n<p>None.</p>'
    return '<h2 id="dropped">Dropped videos</h2>\n' + _table(("video", "reason", "detail"), rows)


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Cells are HTML already: numbers and bars are made here, texts escaped by the caller."""
    head = "".join(f"<th>{header}</th>" for header in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>\n" for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}</table>\n"


def _number(value: float | None) -> str:
    return "–" if value is None else str(value)  # summary.json's values, already rounded


def _stats_cells(stats: dict[str, Any]) -> list[str]:
    return [_number(stats[key]) for key in ("count", "total", "mean", "min", "max")]


def _bar(part: int, whole: int) -> str:
    percent = f"{part / whole * 100 if whole else 0.0:.1f}%"
    return f'<span class="bar"><span style="width:{percent}"></span></span> {percent}'

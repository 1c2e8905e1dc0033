"""A run as one static HTML file that opens without a server: `streameval report RUN --html F`.

The file is the dashboard itself (scorer/service/dashboard/static) with its style sheet and
scripts inlined and the run's data embedded as JSON in the shapes the results API serves: the
run, its metrics under one scoring profile, every record's result, and the records' timelines
and benchmark annotations. The dashboard reads that JSON instead of calling the API, so the
report shows the same pages, tables, exports and timelines. Frame thumbnails are embedded
only when asked for (they make the file larger); without them the timelines show frame ticks.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from streameval.core.store.store import Store
from streameval.scorer.judging.judges import Judge
from streameval.scorer.profiles import ScoringProfile, get_profile
from streameval.scorer.report import cached, profile_report, score_run
from streameval.scorer.service.dashboard import STATIC_DIR
from streameval.scorer.service.dashboard.frames import FramesUnavailable, RunFrames, thumbnail
from streameval.scorer.service.dashboard.help import metric_help
from streameval.scorer.service.run_details import RunDetail, run_detail
from streameval.scorer.service.timeline import record_timeline
from streameval.scorer.source import store_source

SCHEMA = "streameval-report/1"
DEFAULT_MAX_TIMELINES = 1000
THUMBNAIL_WIDTH = 96  # pixels; drawn 64 wide on the timeline
_STYLESHEET = '<link rel="stylesheet" href="style.css">'
_ICON = '<link rel="icon" href="favicon.svg" type="image/svg+xml">\n'
_SCRIPT = re.compile(r'<script src="(js/[\w.-]+\.js)"></script>')


@dataclass(frozen=True)
class ReportSummary:
    path: Path
    records: int
    timelines: int
    videos_with_frames: int
    size_bytes: int


def report_data(
    store: Store,
    run_id: str,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
    max_timelines: int = DEFAULT_MAX_TIMELINES,
    thumbnails: bool = False,
) -> dict[str, Any]:
    """Everything the report shows, as the API would serve it; timelines of the first
    `max_timelines` records (by id) only, so that huge runs stay a readable file; with
    `thumbnails`, the frames those timelines sent, per video."""
    profile = get_profile(profile)
    judge = cached(judge)
    scores = score_run(store, run_id, profile, judge)
    source = store_source(store, run_id)
    record_ids = [record.record_id for record in scores.records]
    timelines = {
        record_id: record_timeline(source, record_id, profile, judge).model_dump(mode="json")
        for record_id in record_ids[:max_timelines]
    }
    annotations = {data["record_id"]: data for data in source.records}
    return {
        "schema": SCHEMA,
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "profile": profile.name,
        "profiles": [profile_report(profile).model_dump(mode="json")],
        "run": RunDetail.model_validate(run_detail(store, run_id)).model_dump(mode="json"),
        "metrics": scores.to_json(),
        "records": [record.model_dump(mode="json") for record in scores.records],
        "annotations": annotations,
        "timelines": timelines,
        "videos": _thumbnails(store, run_id, timelines, annotations) if thumbnails else {},
        "metric_help": [entry.model_dump(mode="json") for entry in metric_help()],
    }


def _thumbnails(
    store: Store,
    run_id: str,
    timelines: dict[str, dict[str, Any]],
    annotations: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Per video path: its frame index and, as data URLs, every frame a timeline shows."""
    finder = RunFrames(store)
    videos: dict[str, dict[str, Any]] = {}
    for record_id, timeline in timelines.items():
        video_path = annotations[record_id]["video_path"]
        entry = videos.get(video_path)
        if entry is None:
            try:
                frames = finder.video_frames(run_id, record_id)
            except FramesUnavailable:
                continue
            entry = videos[video_path] = {
                "frames": finder.index(run_id, record_id).model_dump(mode="json"),
                "images": {},
                "source": frames,
            }
        for point in timeline["frames"]:
            index = str(point["index"])
            if not point["dropped"] and index not in entry["images"]:
                jpeg = thumbnail(entry["source"], point["index"], THUMBNAIL_WIDTH)
                entry["images"][index] = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    for entry in videos.values():
        del entry["source"]
    return videos


def _inline(tag: str, text: str) -> str:
    # A closing tag inside the text would end the element early.
    if f"</{tag}" in text.lower():
        raise ValueError(f"a dashboard asset contains </{tag}> and cannot be inlined")
    return f"<{tag}>\n{text}</{tag}>"


def _embedded_json(data: dict[str, Any]) -> str:
    # "<" only occurs inside JSON strings, where \u003c means the same: no "</script>" can
    # appear, whatever the records' texts hold.
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="streameval-report">{text}</script>'


def render_html(data: dict[str, Any]) -> str:
    """The dashboard page with its assets inlined and `data` embedded before its scripts."""
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    css = (STATIC_DIR / "style.css").read_text(encoding="utf-8")
    page = page.replace(_STYLESHEET, _inline("style", css))
    page = page.replace(_ICON, "")  # a report has no favicon.svg beside it to load
    page = page.replace(
        "<title>streameval dashboard</title>",
        f"<title>streameval report · run {data['run']['run_id']}</title>",
    )
    first_script = _SCRIPT.search(page)
    if first_script is None:
        raise ValueError(f"{STATIC_DIR / 'index.html'} loads no scripts")
    page = page[: first_script.start()] + _embedded_json(data) + "\n" + page[first_script.start() :]
    return _SCRIPT.sub(
        lambda match: _inline("script", (STATIC_DIR / match.group(1)).read_text(encoding="utf-8")),
        page,
    )


def write_report(
    store: Store,
    run_id: str,
    path: Path,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
    max_timelines: int = DEFAULT_MAX_TIMELINES,
    thumbnails: bool = False,
) -> ReportSummary:
    data = report_data(store, run_id, profile, judge, max_timelines, thumbnails)
    text = render_html(data)
    path.write_text(text, encoding="utf-8")
    return ReportSummary(
        path=path,
        records=len(data["records"]),
        timelines=len(data["timelines"]),
        videos_with_frames=len(data["videos"]),
        size_bytes=len(text.encode("utf-8")),
    )

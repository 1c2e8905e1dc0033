"""Stage 5 end to end: audit, dataset, `<out>/summary.json` and `<out>/report.html`.

The summary describes what went into the dataset: videos in, kept and dropped per reason,
the category distribution, durations, the Silent share of the actions and how often each
question was answered. Everything but the dropped list is computed over the kept
trajectories, i.e. over what the model is fine-tuned on.

A dataset the audit refuses as a whole (its Silent share out of bounds) is not written:
`train.jsonl` is removed (an earlier run's would not match this summary), the summary says
why (`refused`) and still shows every count, so the share can be seen and judged.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from streameval.synth.dataset import (
    DATASET_FILE,
    DatasetResult,
    answerable_questions,
    write_dataset,
)
from streameval.synth.filters import (
    DEFAULT_BOUNDS,
    AuditResult,
    DigestOf,
    FileExists,
    Reason,
    SilentShareBounds,
    audit,
    file_digest,
    silent_steps,
)
from streameval.synth.models import Category, Trajectory
from streameval.synth.report import write_report
from streameval.synth.taxonomy import CATEGORIES

SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"
FORMAT = "streameval-synth-summary/2"  # 2: the Silent share's bounds, `refused`


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Stats(_Model):
    count: int
    total: int | float  # counts stay integers
    mean: float | None  # None when count is 0, as min and max
    min: int | float | None
    max: int | float | None


class DatasetFile(_Model):
    path: str
    sha256: str
    rows: int  # conversations, one per kept video
    steps: int  # assistant turns: Algorithm 1's samples
    images: int


class Videos(_Model):
    received: int
    kept: int
    dropped: int
    dropped_by_reason: dict[Reason, int]


class Actions(_Model):
    steps: int
    silent: int
    respond: int
    silent_share: float | None  # silent / steps
    silent_share_min: float  # the bounds the audit held the share to
    silent_share_max: float
    silent_share_per_trajectory: Stats  # each kept trajectory's own share


class Questions(_Model):
    generated: int  # K per kept video, summed
    asked: int  # with a relevant segment: the ones the conversations ask
    responses_per_question: Stats  # over the asked questions
    responses_histogram: dict[int, int]  # responses -> asked questions with that many


class DroppedVideo(_Model):
    video: str
    reason: Reason
    detail: str


class Summary(_Model):
    format: str = FORMAT
    refused: str | None  # why the dataset was not written (the audit's one line), if it was not
    dataset: DatasetFile | None  # None when refused
    videos: Videos
    categories: dict[Category, int]  # kept videos per category, every category present
    video_duration_s: Stats
    trajectory_duration_s: Stats  # from the first segment's start to the last one's end
    trajectory_steps: Stats
    actions: Actions
    questions: Questions
    dropped: list[DroppedVideo]


def write_stage5(
    trajectories: Sequence[Trajectory],
    out_dir: Path,
    *,
    bounds: SilentShareBounds = DEFAULT_BOUNDS,
    system_prompt: str | None = None,
    frame_label: str | None = None,
    file_exists: FileExists = os.path.isfile,
    digest_of: DigestOf = file_digest,
) -> Summary:
    """Audit the trajectories, write the kept ones as `<out_dir>/train.jsonl` unless the
    audit refuses them, and the summary as `<out_dir>/summary.json` and `report.html`."""
    result = audit(trajectories, file_exists=file_exists, digest_of=digest_of, bounds=bounds)
    if result.refused is None:
        dataset = write_dataset(
            result.kept, out_dir, system_prompt=system_prompt, frame_label=frame_label
        )
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / DATASET_FILE).unlink(missing_ok=True)
        dataset = None
    summary = summarise(len(trajectories), result, dataset, bounds)
    (out_dir / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2) + "\n", "utf-8")
    write_report(summary.model_dump(mode="json"), out_dir / REPORT_FILE)
    return summary


def summarise(
    received: int,
    result: AuditResult,
    dataset: DatasetResult | None,
    bounds: SilentShareBounds,
) -> Summary:
    kept = result.kept
    silent, steps = silent_steps(kept)
    responses = _responses_per_asked_question(kept)
    return Summary(
        refused=result.refused,
        dataset=None
        if dataset is None
        else DatasetFile(
            path=str(dataset.path),
            sha256=dataset.sha256,
            rows=dataset.rows,
            steps=dataset.steps,
            images=dataset.images,
        ),
        videos=Videos(
            received=received,
            kept=len(kept),
            dropped=len(result.dropped),
            dropped_by_reason=result.counts(),
        ),
        categories={category: sum(t.category == category for t in kept) for category in CATEGORIES},
        video_duration_s=stats([t.duration_s for t in kept]),
        trajectory_duration_s=stats([t.segments[-1].end_s - t.segments[0].start_s for t in kept]),
        trajectory_steps=stats([len(t.actions) for t in kept]),
        actions=Actions(
            steps=steps,
            silent=silent,
            respond=steps - silent,
            silent_share=round(silent / steps, 4) if steps else None,
            silent_share_min=bounds.min,
            silent_share_max=bounds.max,
            silent_share_per_trajectory=stats([_silent_share(t) for t in kept]),
        ),
        questions=Questions(
            generated=sum(len(t.questions) for t in kept),
            asked=len(responses),
            responses_per_question=stats(responses),
            responses_histogram=dict(sorted(Counter(responses).items())),
        ),
        dropped=[
            DroppedVideo(video=d.video, reason=d.reason, detail=d.detail) for d in result.dropped
        ],
    )


def _silent_share(trajectory: Trajectory) -> float:
    silent, steps = silent_steps([trajectory])
    return silent / steps  # a kept trajectory has a step


def _responses_per_asked_question(kept: Sequence[Trajectory]) -> list[int]:
    counts = []
    for trajectory in kept:
        answered = Counter(action.question for action in trajectory.actions)
        counts.extend(answered[question.index] for question in answerable_questions(trajectory))
    return counts


def stats(values: Sequence[float]) -> Stats:
    """Count, total, mean, min and max; 3 decimals (the mean 4): seconds to the millisecond."""
    if not values:
        return Stats(count=0, total=0, mean=None, min=None, max=None)
    return Stats(
        count=len(values),
        total=round(sum(values), 3),
        mean=round(sum(values) / len(values), 4),
        min=round(min(values), 3),
        max=round(max(values), 3),
    )

"""Stage 5's output: the trajectories as an ms-swift conversation dataset (docs/synth.md).

One row of `train.jsonl` per trajectory, one multi-turn conversation per video:

- user turn t: an `<image>` tag per frame of segment t (the first turn also asks the video's
  questions);
- assistant turn t: the action a_t, the literal `Silent` or the model's response.

Algorithm 1 (line 15) adds one sample (V_1:t, q_1:t, a_t) per step. A decoder attends only
to what comes before a token, so assistant turn t is conditioned on the frames of segments
0..t, the questions and the earlier actions: RealStreamEval's history H_t, never a later
frame. ms-swift's default loss (`--loss_scale default`) trains every assistant turn, so
one row trains all the steps of a video at once, with each frame's image tokens in the
sequence once instead of once per later step.

Images are absolute paths (ms-swift's documentation prefers them; relative ones would be
opened from the trainer's working directory), so the dataset is valid where it was written.

With `frame_label` (off by default), each `<image>` tag follows its frame's time label, as
the harness's chat adapters lay out a frame (adapters/chat_prompts.py, FRAME_LABEL
"Frame at {t:g}s:"): a model tuned on it is served with their default `frame_label`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streameval.synth.models import SILENT, SynthQuestion, Trajectory

DATASET_FILE = "train.jsonl"
IMAGE_TAG = "<image>"
# Tags ms-swift replaces by media; one in a model's text would shift the images.
MEDIA_TAGS = ("<image>", "<video>", "<audio>")
QUESTIONS_PROMPT = "Questions about this live video:\n{questions}"


@dataclass(frozen=True)
class DatasetResult:
    path: Path  # <out>/train.jsonl
    rows: int  # conversations: one per trajectory
    steps: int  # assistant turns: Algorithm 1's samples (V_1:t, q_1:t, a_t)
    images: int
    sha256: str  # of train.jsonl: record it with the fine-tuned model


def answerable_questions(trajectory: Trajectory) -> tuple[SynthQuestion, ...]:
    """The questions with at least one relevant segment. The others have no visual evidence
    in the video (the audit's "unanswerable"; Stage 3 discards them, Table 8), so the
    conversation does not ask them."""
    return tuple(
        question
        for question in trajectory.questions
        if any(row[question.index] for row in trajectory.relevance)
    )


def dataset_row(
    trajectory: Trajectory, system_prompt: str | None = None, frame_label: str | None = None
) -> dict[str, Any]:
    """The trajectory's conversation in ms-swift's standard format: messages and images.
    `frame_label` ({t}: the frame's time in seconds) goes before each frame's tag."""
    messages: list[dict[str, str]] = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
    images: list[str] = []
    steps = zip(trajectory.segments, trajectory.actions, strict=True)
    for position, (segment, action) in enumerate(steps):
        if frame_label is None:
            user = IMAGE_TAG * len(segment.frames)
        else:
            user = "".join(frame_label.format(t=t) + IMAGE_TAG for t in segment.times_s)
        if position == 0:
            user += _questions_text(answerable_questions(trajectory))
        images.extend(str(Path(frame).resolve()) for frame in segment.frames)
        messages.append({"role": "user", "content": user})
        reply = SILENT if action.decision == "silent" else action.response
        messages.append({"role": "assistant", "content": reply or ""})
    return {"messages": messages, "images": images}


def _questions_text(questions: Sequence[SynthQuestion]) -> str:
    numbered = "\n".join(f"{number}. {q.text}" for number, q in enumerate(questions, 1))
    return QUESTIONS_PROMPT.format(questions=numbered)


def media_tag_problem(row: dict[str, Any]) -> str | None:
    """Why ms-swift would pair the row's tags and images wrongly, or None: it replaces the
    n-th `<image>` of the conversation by the n-th image, and this dataset has no videos or
    audios."""
    text = "".join(message["content"] for message in row["messages"])
    for tag in MEDIA_TAGS:
        expected = len(row["images"]) if tag == IMAGE_TAG else 0
        found = text.count(tag)
        if found != expected:
            return f"{found} {tag} tags for {expected} {tag[1:-1]}s"
    return None


def write_dataset(
    trajectories: Sequence[Trajectory],
    out_dir: Path,
    *,
    system_prompt: str | None = None,
    frame_label: str | None = None,
) -> DatasetResult:
    """Write `<out_dir>/train.jsonl`, one row per trajectory, in order. The trajectories
    should have passed the audit (synth/filters.py); a row whose tags and images would not
    pair is refused, since ms-swift would train on misplaced frames."""
    rows = [dataset_row(trajectory, system_prompt, frame_label) for trajectory in trajectories]
    for trajectory, row in zip(trajectories, rows, strict=True):
        problem = media_tag_problem(row)
        if problem is not None:
            raise ValueError(f"{trajectory.video}: {problem}")
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / DATASET_FILE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)  # a reader never sees half a dataset
    return DatasetResult(
        path=path,
        rows=len(rows),
        steps=sum(len(trajectory.actions) for trajectory in trajectories),
        images=sum(len(row["images"]) for row in rows),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )

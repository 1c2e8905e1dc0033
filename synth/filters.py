"""Stage 5's audit: the paper's "sample validity" criterion (seed 002, Table 8) as filters.

A sample is a trajectory: one video's conversation (synth/dataset.py). A trajectory is
dropped, with one reason (the first that applies, in this order):

1. `no_relevant_segment`: no segment is relevant to any question, so every action is
   Silent and the video teaches nothing about when to respond.
2. `malformed`: the stages' outputs do not fit together (relevance matrix, actions and
   questions of different sizes), a response is empty or a silence token, a step has no
   frame, a frame file is missing, or the row's `<image>` tags would not pair with its
   images (a model's text holding a media tag).
3. `temporally_inconsistent`: segments out of order or overlapping (a frame would reach a
   step before its time), an action for another segment, a response to a question that is
   not relevant at its step (before its evidence), or Silent where a question is relevant.
4. `duplicate`: a near-identical trajectory was kept before it: the same video (its
   resolved path) with the same questions and the same actions at the same steps, texts
   compared case-, punctuation- and whitespace-insensitively.

Questions with no relevant segment are not a reason to drop a video: the conversation
leaves them out (dataset.answerable_questions).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from streameval.adapters.chat_prompts import is_silence
from streameval.synth.dataset import answerable_questions, dataset_row, media_tag_problem
from streameval.synth.models import SILENT, Trajectory

Reason = Literal["no_relevant_segment", "malformed", "temporally_inconsistent", "duplicate"]
REASONS: tuple[Reason, ...] = get_args(Reason)
# The silence tokens of the `realstream` scoring profile (scorer/profiles.py, EXTENDED_RULES;
# this package does not import the scorer): a response that reads as one is no response.
SILENCE_TOKENS = (SILENT, "wait", "<silent>")

FileExists = Callable[[str], bool]


@dataclass(frozen=True)
class Dropped:
    video: str
    reason: Reason
    detail: str


@dataclass(frozen=True)
class AuditResult:
    kept: tuple[Trajectory, ...]
    dropped: tuple[Dropped, ...]

    def counts(self) -> dict[Reason, int]:
        """Dropped trajectories per reason, every reason present."""
        return {reason: sum(d.reason == reason for d in self.dropped) for reason in REASONS}


def audit(
    trajectories: Sequence[Trajectory], *, file_exists: FileExists = os.path.isfile
) -> AuditResult:
    """Keep the trajectories that pass every filter, in order; record why the others fail."""
    kept: list[Trajectory] = []
    dropped: list[Dropped] = []
    seen: set[tuple] = set()
    for trajectory in trajectories:
        failure = _first_failure(trajectory, file_exists) or _duplicate(trajectory, seen)
        if failure is None:
            kept.append(trajectory)
        else:
            dropped.append(Dropped(trajectory.video, *failure))
    return AuditResult(tuple(kept), tuple(dropped))


def _duplicate(trajectory: Trajectory, seen: set[tuple]) -> tuple[Reason, str] | None:
    """For a valid trajectory: the failure if a near-identical one was kept before, else
    None, and its key joins the kept ones'."""
    key = duplicate_key(trajectory)
    if key in seen:
        return "duplicate", "a near-identical trajectory of this video was kept before"
    seen.add(key)
    return None


def _first_failure(trajectory: Trajectory, file_exists: FileExists) -> tuple[Reason, str] | None:
    if not any(any(row) for row in trajectory.relevance):
        return "no_relevant_segment", "no segment is relevant to any question"
    problem = malformed(trajectory, file_exists)
    if problem is not None:
        return "malformed", problem
    problem = temporally_inconsistent(trajectory)
    if problem is not None:
        return "temporally_inconsistent", problem
    return None


def malformed(trajectory: Trajectory, file_exists: FileExists = os.path.isfile) -> str | None:
    """The first reason the trajectory cannot become a valid row, or None."""
    segments, questions = len(trajectory.segments), len(trajectory.questions)
    if segments == 0:
        return "no segments"
    if [question.index for question in trajectory.questions] != list(range(questions)):
        return "questions are not numbered 0, 1, ... in order"
    shape = [len(row) for row in trajectory.relevance]
    if shape != [questions] * segments:
        return f"relevance rows of {shape} for {segments} segments x {questions} questions"
    if len(trajectory.actions) != segments:
        return f"{len(trajectory.actions)} actions for {segments} segments"
    for step, action in enumerate(trajectory.actions):
        problem = _action_problem(action.decision, action.question, action.response, questions)
        if problem is not None:
            return f"step {step}: {problem}"
    for step, segment in enumerate(trajectory.segments):
        if not segment.frames:
            return f"step {step}: no frame"
        missing = next((frame for frame in segment.frames if not file_exists(frame)), None)
        if missing is not None:
            return f"step {step}: frame file missing: {missing}"
    return media_tag_problem(dataset_row(trajectory))


def _action_problem(
    decision: str, question: int | None, response: str | None, questions: int
) -> str | None:
    if decision == "silent":
        if question is not None or response is not None:
            return "a Silent action with a question or a response"
        return None
    if question is None or not 0 <= question < questions:
        return f"a response to question {question} of {questions}"
    if response is None or not response.strip():
        return "empty response"
    if is_silence_token(response):
        return f"the response is a silence token: {response!r}"
    return None


def is_silence_token(text: str) -> bool:
    """Case, quotes, whitespace and a trailing `.`/`!` aside (the adapters' rule)."""
    return any(is_silence(text, token) for token in SILENCE_TOKENS)


def temporally_inconsistent(trajectory: Trajectory) -> str | None:
    """The first way the trajectory breaks the causal roll-out, or None. Expects a
    trajectory that is not malformed (sizes agree)."""
    previous_end = None
    for step, segment in enumerate(trajectory.segments):
        if segment.index != step:
            return f"step {step}: segment numbered {segment.index}"
        if segment.end_s <= segment.start_s:
            return f"step {step}: segment ends at {segment.end_s:g}s, not after its start"
        if previous_end is not None and segment.start_s < previous_end:
            return f"step {step}: segment starts at {segment.start_s:g}s, before the last ends"
        previous_end = segment.end_s
    for step, action in enumerate(trajectory.actions):
        relevant = trajectory.relevance[step]
        if action.segment != step:
            return f"step {step}: the action is for segment {action.segment}"
        if action.decision == "respond" and not relevant[action.question]:
            return f"step {step}: responds to question {action.question}, " + _when_relevant(
                trajectory, action.question, step
            )
        if action.decision == "silent" and any(relevant):
            return f"step {step}: Silent although question {relevant.index(True)} is relevant"
    return None


def _when_relevant(trajectory: Trajectory, question: int, step: int) -> str:
    first = next((t for t, row in enumerate(trajectory.relevance) if row[question]), None)
    if first is None:
        return "which no segment is relevant to"
    if step < first:
        return f"before its first relevant segment ({first})"
    return "which is not relevant at this step"


def duplicate_key(trajectory: Trajectory) -> tuple:
    """What two near-identical trajectories share: video, questions asked, actions."""
    texts = {question.index: normalise(question.text) for question in trajectory.questions}
    actions = tuple(
        None
        if action.decision == "silent"
        else (texts[action.question], normalise(action.response or ""))
        for action in trajectory.actions
    )
    asked = tuple(normalise(question.text) for question in answerable_questions(trajectory))
    return str(Path(trajectory.video).resolve()), asked, actions


def normalise(text: str) -> str:
    """Casefolded words, punctuation and runs of whitespace as one space."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())

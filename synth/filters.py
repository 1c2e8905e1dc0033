"""Stage 5's audit: the paper's "sample validity" criterion (seed 002, Table 8) as filters.

A sample is a trajectory: one video's conversation (synth/dataset.py). A trajectory is
dropped, with one reason (the first that applies, in this order):

1. `no_relevant_segment`: no segment is relevant to any question, so every action is
   Silent and the video teaches nothing about when to respond.
2. `malformed`: the stages' outputs do not fit together (relevance matrix, actions and
   questions of different sizes), a response is empty or a silence token, a step has no
   frame, a frame file is missing or has no time, or the row's `<image>` tags would not
   pair with its images (a model's text holding a media tag).
3. `temporally_inconsistent`: segments out of order or overlapping (a frame would reach a
   step before its time), a frame timed outside its segment, an action for another
   segment, a response to a question that is not relevant at its step (before its
   evidence), or Silent where a question is relevant.
4. `duplicate`: a near-identical trajectory was kept before it: the same video (the same
   bytes, whatever its name: the sha256 of its content) with the same questions and the
   same actions at the same steps, texts compared case-, punctuation- and
   whitespace-insensitively.

Questions with no relevant segment are not a reason to drop a video: the conversation
leaves them out (dataset.answerable_questions).

Then the kept trajectories are audited as a whole: a dataset whose share of Silent steps
lies outside `SilentShareBounds` is refused (`AuditResult.refused`), since it would teach
the wrong policy: respond at every step (a model that calls every segment relevant), or
hardly ever.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from streameval.adapters.chat_prompts import is_silence
from streameval.core.frames.digest import video_digest
from streameval.core.frames.errors import VideoDecodeError
from streameval.synth.dataset import answerable_questions, dataset_row, media_tag_problem
from streameval.synth.models import MAX_SILENT_SHARE, MIN_SILENT_SHARE, SILENT, Trajectory

Reason = Literal["no_relevant_segment", "malformed", "temporally_inconsistent", "duplicate"]
REASONS: tuple[Reason, ...] = get_args(Reason)
# The silence tokens of the `realstream` scoring profile (scorer/profiles.py, EXTENDED_RULES;
# this package does not import the scorer): a response that reads as one is no response.
SILENCE_TOKENS = (SILENT, "wait", "<silent>")

# Frame times are multiples of 1/fps in binary floating point: a frame that opens a segment
# may read a hair before its start (synth/stages.py groups them with the same slack).
_TIME_SLACK_S = 1e-6

FileExists = Callable[[str], bool]
# A video's content digest (sha256 hex) from its path; VideoDecodeError when unreadable.
DigestOf = Callable[[str], str]


def file_digest(video: str) -> str:
    """The sha256 of the video's bytes, read once per version of the file in this process
    (core/frames/digest.py remembers it by path, size, times and inode)."""
    return video_digest(Path(video))


@dataclass(frozen=True)
class SilentShareBounds:
    """The Silent steps' share of all the dataset's steps must lie in [min, max]."""

    min: float = MIN_SILENT_SHARE
    max: float = MAX_SILENT_SHARE

    def problem(self, silent: int, steps: int) -> str | None:
        """Why a dataset with `silent` Silent steps of `steps` is refused, or None. An empty
        dataset has no share to bound."""
        if steps == 0:
            return None
        share = silent / steps
        found = f"the dataset's Silent share is {share:.1%} ({silent} of {steps} steps)"
        if share < self.min:
            return f"{found}, below the minimum {self.min:g} (--min-silent-share)"
        if share > self.max:
            return f"{found}, above the maximum {self.max:g} (--max-silent-share)"
        return None


DEFAULT_BOUNDS = SilentShareBounds()


@dataclass(frozen=True)
class Dropped:
    video: str
    reason: Reason
    detail: str


@dataclass(frozen=True)
class AuditResult:
    kept: tuple[Trajectory, ...]
    dropped: tuple[Dropped, ...]
    refused: str | None = None  # why the kept trajectories must not be written, if they must not

    def counts(self) -> dict[Reason, int]:
        """Dropped trajectories per reason, every reason present."""
        return {reason: sum(d.reason == reason for d in self.dropped) for reason in REASONS}


def audit(
    trajectories: Sequence[Trajectory],
    *,
    file_exists: FileExists = os.path.isfile,
    digest_of: DigestOf = file_digest,
    bounds: SilentShareBounds | None = None,
) -> AuditResult:
    """Keep the trajectories that pass every filter, in order; record why the others fail;
    with `bounds`, refuse the kept ones as a whole when their Silent share is outside."""
    kept: list[Trajectory] = []
    dropped: list[Dropped] = []
    seen: dict[tuple, str] = {}  # duplicate key -> the kept trajectory's video
    for trajectory in trajectories:
        failure = _first_failure(trajectory, file_exists) or _duplicate(trajectory, seen, digest_of)
        if failure is None:
            kept.append(trajectory)
        else:
            dropped.append(Dropped(trajectory.video, *failure))
    refused = bounds.problem(*silent_steps(kept)) if bounds is not None else None
    return AuditResult(tuple(kept), tuple(dropped), refused)


def silent_steps(trajectories: Sequence[Trajectory]) -> tuple[int, int]:
    """Silent steps and all steps of the trajectories."""
    actions = [action for trajectory in trajectories for action in trajectory.actions]
    return sum(action.decision == "silent" for action in actions), len(actions)


def _duplicate(
    trajectory: Trajectory, seen: dict[tuple, str], digest_of: DigestOf
) -> tuple[Reason, str] | None:
    """For a valid trajectory: the failure if a near-identical one was kept before, else
    None, and its key joins the kept ones'."""
    key = duplicate_key(trajectory, digest_of)
    first = seen.get(key)
    if first is None:
        seen[key] = trajectory.video
        return None
    if os.path.abspath(first) == os.path.abspath(trajectory.video):
        return "duplicate", "a near-identical trajectory of this video was kept before"
    return "duplicate", f"a near-identical trajectory of {first}, the same video, was kept before"


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
        if len(segment.times_s) != len(segment.frames):
            return (
                f"step {step}: {len(segment.times_s)} frame times for {len(segment.frames)} frames"
            )
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
        outside = [
            t for t in segment.times_s if not segment.start_s - _TIME_SLACK_S <= t < segment.end_s
        ]
        if outside:
            return (
                f"step {step}: frames at {outside}s, outside its segment "
                f"[{segment.start_s:g}s, {segment.end_s:g}s)"
            )
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


def duplicate_key(trajectory: Trajectory, digest_of: DigestOf = file_digest) -> tuple:
    """What two near-identical trajectories share: video, questions asked, actions."""
    texts = {question.index: normalise(question.text) for question in trajectory.questions}
    actions = tuple(
        None
        if action.decision == "silent"
        else (texts[action.question], normalise(action.response or ""))
        for action in trajectory.actions
    )
    asked = tuple(normalise(question.text) for question in answerable_questions(trajectory))
    return video_identity(trajectory.video, digest_of), asked, actions


def video_identity(video: str, digest_of: DigestOf = file_digest) -> str:
    """The video's content digest: two names of the same bytes (a copy, a link) are one
    video. A video no longer readable falls back to its resolved path."""
    try:
        return "sha256:" + digest_of(video)
    except VideoDecodeError:
        return "path:" + str(Path(video).resolve())


def normalise(text: str) -> str:
    """Casefolded words, punctuation and runs of whitespace as one space."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())

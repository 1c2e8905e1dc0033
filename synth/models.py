"""What the stages of `streameval synth` hand each other, and what the dataset is built from.

Stage 1 gives a video its task category, stage 2 its questions, stage 3 the relevance matrix
(segment x question), stage 4 the trajectory: one action per segment, Silent or a response
to one relevant question, produced from the frames up to that segment only. Stage 5 turns
trajectories into dataset rows (synth/dataset.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

# The taxonomy of the paper (seed 002, Appendix A.1, Table 5); definitions in synth/taxonomy.py.
Category = Literal["IV", "MD", "TA", "AM", "DED"]
SILENT = "Silent"  # the literal assistant turn of a step with nothing to say
# The Silent share's default bounds (docs/synth.md). Lower: RealStreamEval's FAR verbosity
# multiplier (seed 002, Eq. 4) is 1.0 only for an answer rate below 0.4, so a dataset that
# responds at more than 40% of its steps teaches a penalised rate (40% is the edge). Upper:
# ours (the paper states none): past 95% a constant Silent is right on all but 1 step in 20.
MIN_SILENT_SHARE = 0.6
MAX_SILENT_SHARE = 0.95


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Segment(_Frozen):
    """One of a video's S fixed-length intervals, with the frames sampled in it."""

    index: int  # t, from 0
    start_s: float
    end_s: float
    frames: tuple[str, ...]  # JPEG paths of the frames sampled in [start_s, end_s)
    times_s: tuple[float, ...]  # each frame's time in the video (its optional label)


class SynthQuestion(_Frozen):
    index: int  # k, from 0
    text: str


class Action(_Frozen):
    """The roll-out's action a_t at segment t."""

    segment: int  # t
    decision: Literal["silent", "respond"]
    question: int | None = None  # k*, the relevant question answered (respond only)
    response: str | None = None  # the model's reply given the frames up to t (respond only)


class Trajectory(_Frozen):
    """Everything stage 5 needs of one video."""

    video: str  # path of the source video
    duration_s: float
    category: Category
    questions: tuple[SynthQuestion, ...]
    segments: tuple[Segment, ...]
    relevance: tuple[tuple[bool, ...], ...]  # [t][k]: segment t holds evidence for question k
    actions: tuple[Action, ...]  # one per segment, in order

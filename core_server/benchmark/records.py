"""The in-memory benchmark schema shared by every benchmark source.

Synthetic, TRACE, OVO-Bench and StreamingBench records are all converted into these two
record types; the Core, the scorer and the importers speak only this schema. It follows the
TRACE release ("osb-canonical-v0") so that a TRACE record maps field for field.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

TriggerType = Literal["event_onset", "event_completion", "clue_sufficient", "state_interval"]


class EvidenceSpan(BaseModel):
    model_config = ConfigDict(frozen=True)

    start_s: float
    end_s: float
    description: str = ""


class Trigger(BaseModel):
    """One target of a proactive task: a point trigger or a state interval.

    Point triggers carry `point_s`; the scorer builds their windows with its tolerance.
    State intervals carry `interval_start_s`/`interval_end_s`, used as the window as is.
    `window_end_s` is the annotated end of the response window, when the source gives one;
    the Core streams up to it, the scorer never reads it (it applies its own tolerance).
    """

    model_config = ConfigDict(frozen=True)

    trigger_type: TriggerType
    answer: str
    point_s: float | None = None
    interval_start_s: float | None = None
    interval_end_s: float | None = None
    window_end_s: float | None = None
    accepted_facts: tuple[str, ...] = ()
    evidence_start_s: float | None = None
    evidence_end_s: float | None = None

    @property
    def is_state(self) -> bool:
        return self.trigger_type == "state_interval"

    @property
    def start_s(self) -> float:
        start = self.interval_start_s if self.is_state else self.point_s
        if start is None:
            raise ValueError(f"trigger {self.trigger_type} has no start time")
        return start

    def streamed_end_s(self, tolerance_s: float) -> float:
        """End of this target's window as the Core streams it (the annotated end, when the
        source gives one, can only lengthen the scorer's tolerance window)."""
        if self.is_state:
            return self.interval_end_s if self.interval_end_s is not None else self.start_s
        if self.window_end_s is not None:
            return max(self.window_end_s, self.start_s + tolerance_s)
        return self.start_s + tolerance_s


class Probe(BaseModel):
    """A question asked at a fixed time while a proactive task runs (OVO-Bench's offline
    probes). Profiles that ask probes send them as questions; others ignore them."""

    model_config = ConfigDict(frozen=True)

    t: float
    question: str
    answer: str
    options: tuple[str, ...] = ()


class QARecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    task: Literal["qa"] = "qa"
    record_id: str
    source_id: str
    source_benchmark: str
    task_type: str
    video_path: str
    question: str
    options: tuple[str, ...]
    answer: str
    question_time_s: float
    evidence_anchor_s: float
    evidence_spans: tuple[EvidenceSpan, ...] = ()
    metadata: dict = Field(default_factory=dict)
    # A task that cannot be answered without the video's sound: a run of a benchmark with
    # such records streams audio by default. Left out of a dump when unset (as
    # `stream_end_s`), so earlier records dump, compare and export as before.
    needs_audio: bool = Field(default=False, exclude_if=lambda value: not value)

    @property
    def timeline_end_s(self) -> float:
        return self.question_time_s


class ProactiveRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    task: Literal["proactive"] = "proactive"
    record_id: str
    source_id: str
    source_benchmark: str
    task_type: str
    video_path: str
    instruction: str
    instruction_time_s: float
    triggers: tuple[Trigger, ...]
    probes: tuple[Probe, ...] = ()
    metadata: dict = Field(default_factory=dict)
    # A negative stream (core_server/run/negative_streams.py): no triggers, frames up to here.
    # Left out of a dump when unset: a benchmark record dumps as before the field existed,
    # so runs stored earlier compare equal on resume (run_inputs.records_diff) and exports
    # keep their bytes.
    stream_end_s: float | None = Field(default=None, exclude_if=lambda value: value is None)
    needs_audio: bool = Field(default=False, exclude_if=lambda value: not value)

    def last_window_end_s(self, tolerance_s: float) -> float:
        """End of the last target window (of a negative stream, its end): the Core streams
        frames up to here."""
        if self.stream_end_s is not None:
            return self.stream_end_s
        return max(trigger.streamed_end_s(tolerance_s) for trigger in self.triggers)


Record = Annotated[QARecord | ProactiveRecord, Field(discriminator="task")]


class Benchmark(BaseModel):
    """A named set of records and the folder their `video_path`s are relative to."""

    name: str
    version: str
    video_root: str
    records: list[Record]

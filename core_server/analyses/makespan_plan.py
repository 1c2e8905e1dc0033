"""`streameval plan`: a benchmark's makespan on N GPUs, predicted before asking for them.

Each session's service time on one GPU slot is modelled from its record alone:

    max(streamed length / speed, frames x per-frame cost) + per-answer cost + overhead

(under logical pacing the first term is frames x per-frame cost only). The sessions are then
laid out longest first, each on the slot that frees up first: the longest-processing-time
(LPT) schedule, which is what workers claiming the longest pending session first produce.
Every slot starts `start_s` late: what a worker's first session waits for once (joining the
run, decoding its first video), which a larger allocation pays once per slot, not per session.
The costs come from the command line (`--per-frame-s`, `--per-answer-s`, `--overhead-s`,
`--start-s`) or are measured on a stored run (`--from-run`): its finished sessions' wall
times less their modelled streaming time, averaged over each slot's later sessions, are the
overhead per session, and what each slot's first session took beyond that, the start.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from streameval.core.benchmark.records import QARecord
from streameval.core.config import PROTOCOL_PROFILES, RunConfig
from streameval.core.errors import CoreError
from streameval.core.run.perturb_records import Record
from streameval.core.run.session_timeline import expected_stream_s
from streameval.core.store.light import SessionInfo


class PlanError(CoreError):
    """A plan that cannot be made (no sessions, no GPUs, a run without measurements)."""


@dataclass(frozen=True)
class ServiceModel:
    """What one session costs a GPU slot, in seconds."""

    per_frame_s: float = 0.0
    per_answer_s: float = 0.0
    overhead_s: float = 0.0
    start_s: float = 0.0  # once per slot, before its first session


@dataclass(frozen=True)
class Plan:
    gpus: int
    slots: int  # gpus x sessions per GPU
    sessions: int
    total_s: float  # sum of the sessions' service times
    longest_s: float
    makespan_s: float  # of the LPT schedule, every slot starting start_s late

    @property
    def ideal_s(self) -> float:
        """The lower bound no schedule beats: max(total / slots, longest session)."""
        return max(self.total_s / self.slots, self.longest_s)


def lpt_makespan(durations: Sequence[float], slots: int) -> float:
    """The makespan of laying `durations` out longest first, each on the slot free first."""
    if slots < 1:
        raise PlanError(f"need at least one GPU slot, got {slots}")
    free_at = [0.0] * min(slots, max(len(durations), 1))
    for duration in sorted(durations, reverse=True):
        heapq.heapreplace(free_at, free_at[0] + duration)
    return max(free_at)


def _frames(length_s: float, fps: float) -> int:
    """Frames sampled at `fps` over `length_s` seconds, both ends included."""
    return math.floor(length_s * fps + 1e-9) + 1


def _answers(record: Record) -> int:
    if isinstance(record, QARecord):
        return 1
    return max(len(record.triggers), 1)


def streaming_s(record: Record, config: RunConfig) -> float:
    """The part of a session's time its pacing sets: streamed length / speed under
    wall-clock pacing, nothing under logical pacing (frames go as fast as acknowledged)."""
    if config.pacing != "wall_clock":
        return 0.0
    resolved = config.resolved()
    return expected_stream_s(record, resolved, PROTOCOL_PROFILES[config.profile]) / config.speed


def service_s(record: Record, config: RunConfig, model: ServiceModel) -> float:
    resolved = config.resolved()
    length = expected_stream_s(record, resolved, PROTOCOL_PROFILES[config.profile])
    assert resolved.fps is not None
    computing = _frames(length, resolved.fps) * model.per_frame_s
    answering = _answers(record) * model.per_answer_s
    return max(streaming_s(record, config), computing) + answering + model.overhead_s


def plan(
    records: Sequence[Record], config: RunConfig, model: ServiceModel, gpus: int, per_gpu: int
) -> Plan:
    """The LPT makespan of `records` on `gpus` GPUs taking `per_gpu` sessions each."""
    if gpus < 1 or per_gpu < 1:
        raise PlanError(f"--gpus and --concurrency must be at least 1, got {gpus} and {per_gpu}")
    if not records:
        raise PlanError("the benchmark has no records to plan")
    durations = [service_s(record, config, model) for record in records]
    slots = gpus * per_gpu
    return Plan(
        gpus,
        slots,
        len(durations),
        sum(durations),
        max(durations),
        lpt_makespan(durations, slots) + model.start_s,
    )


def measured_costs(
    records: Sequence[Record], sessions: Sequence[SessionInfo], config: RunConfig, run_id: str
) -> tuple[float, float]:
    """(overhead per session, start per slot) from the run's finished sessions: the mean
    of (wall time - modelled streaming time) over each slot's later sessions, and over its
    first ones less that overhead. A slot is a worker's endpoint; a run whose slots ran one
    session each cannot tell the two apart, and all of it is overhead."""
    by_id = {record.record_id: record for record in records}
    finished = sorted(
        (
            s
            for s in sessions
            if s.status == "finished"
            and s.started_at
            and s.finished_at
            and s.record_ids[0] in by_id
        ),
        key=lambda s: (s.started_at, s.session_id),
    )
    if not finished:
        raise PlanError(f"run {run_id} has no finished session to measure costs from")
    slots_seen: set[tuple[str | None, str | None]] = set()
    first: list[float] = []
    later: list[float] = []
    for s in finished:
        excess = (s.finished_at - s.started_at).total_seconds() - streaming_s(
            by_id[s.record_ids[0]], config
        )
        slot = (s.worker_id, s.endpoint)
        (later if slot in slots_seen else first).append(excess)
        slots_seen.add(slot)
    if not later:
        return max(0.0, fmean(first)), 0.0
    overhead = max(0.0, fmean(later))
    return overhead, max(0.0, fmean(first) - overhead)

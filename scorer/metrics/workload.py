"""Workload of one record (TRACE section 2): what the adapter actually submitted and emitted.

Submitted images count every image occurrence of the submission kinds (replays included);
unique frames are the distinct frame ids among them; replayed occurrences the difference;
dropped frames = distinct delivered frames - unique submitted frames: a frame delivered twice
(the `duplicate` perturbation) is two deliveries but one frame, and taking it once drops
nothing. Evicted frames are those a
native adapter removed from its state to bound memory (`evict` records; they were submitted
first, so they are not dropped), and re-prefill tokens what it recomputed to do so (also
counted in input tokens). Prefix-shared images are those at the head of a model call's
prompt that the session's previous call had at the head of its own (the adapter's
`prefix_shared_images`), over the calls that follow an earlier one; following images are
all the images of those calls. A count the adapter did not report is missing (None), never
zero.

Sound (issue 37), over the records whose session has any (`audio_sent` events, or a workload
record that reported sound): the seconds the Core streamed (samples / sample rate of every
chunk), its chunks and those of a video without sound (`silent`), and the seconds and audio
tokens the adapter reported its model calls took in. A record without sound is outside
these metrics' population, so a video-only run has none to show, and its per-record entry
leaves them out.

The family (`WORKLOAD`) reports each count's sum over the records that reported it, and the
prefix share: prefix-shared images / following images, summed over the records.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from streameval.scorer.episodes import SessionTrace
from streameval.scorer.metrics.family import Fields, MetricFamily, RecordEvaluation, number
from streameval.scorer.metrics.statistic import Ratio, Statistic, Sum
from streameval.scorer.profiles import ScoringProfile


@dataclass(frozen=True, slots=True)
class WorkloadResult:
    delivered_frames: int
    core_dropped_frames: int
    submitted_images: int | None
    unique_submitted_frames: int | None
    replayed_occurrences: int | None
    dropped_frames: int | None
    output_tokens: int | None
    input_tokens: int | None
    evicted_frames: int | None
    reprefill_tokens: int | None
    prefix_shared_images: int | None
    following_images: int | None
    model_calls: int
    # Sound: all None for a record without any.
    audio_streamed_s: float | None = None
    audio_chunks: int | None = None
    silent_audio_chunks: int | None = None
    audio_submitted_s: float | None = None
    audio_tokens: int | None = None

    @property
    def has_audio(self) -> bool:
        return any(getattr(self, name) is not None for name in _AUDIO_SUMMED)


def evaluate_workload(trace: SessionTrace, submission_kinds: tuple[str, ...]) -> WorkloadResult:
    tally = trace.workload
    kinds = [kind for kind in submission_kinds if tally.events.get(kind)]
    submitted = unique = None
    if kinds and not any(tally.uncounted.get(kind) for kind in kinds):
        submitted = sum(tally.occurrences.get(kind, 0) for kind in kinds)
        if not any(tally.unlisted.get(kind) for kind in kinds):
            ids: set[str] = set()
            for kind in kinds:
                ids |= tally.frame_ids.get(kind, set())
            unique = len(ids)
    delivered = len(trace.frame_t)
    return WorkloadResult(
        delivered_frames=delivered,
        core_dropped_frames=trace.core_dropped,
        submitted_images=submitted,
        unique_submitted_frames=unique,
        replayed_occurrences=None if unique is None else submitted - unique,
        dropped_frames=None if unique is None else max(0, trace.distinct_frames - unique),
        output_tokens=_output_tokens(trace),
        input_tokens=_input_tokens(trace),
        evicted_frames=None if tally.uncounted.get("evict") else tally.occurrences.get("evict", 0),
        reprefill_tokens=tally.reprefill_tokens,
        prefix_shared_images=tally.prefix_shared_images,
        following_images=tally.following_images,
        model_calls=tally.events.get("model_call", 0),
        **_audio(trace),
    )


def _audio(trace: SessionTrace) -> dict[str, Any]:
    """The record's sound: what the Core streamed, what the adapter said it took in."""
    streamed, tally = trace.audio, trace.workload
    if not streamed.chunks and tally.audio_seconds is None and tally.audio_tokens is None:
        return {}
    return {
        "audio_streamed_s": streamed.seconds,
        "audio_chunks": streamed.chunks,
        "silent_audio_chunks": streamed.silent_chunks,
        "audio_submitted_s": tally.audio_seconds,
        "audio_tokens": tally.audio_tokens,
    }


def _output_tokens(trace: SessionTrace) -> int | None:
    """Sum over closed episodes; missing if any of them did not report its count."""
    counts = [episode.output_tokens for episode in trace.episodes if episode.closed]
    return None if any(count is None for count in counts) else sum(counts)


def _input_tokens(trace: SessionTrace) -> int | None:
    """From the adapter's workload records (every model call), else from the finals."""
    if trace.workload.input_tokens is not None:
        return trace.workload.input_tokens
    counts = [episode.input_tokens for episode in trace.episodes if episode.closed]
    if not counts or any(count is None for count in counts):
        return None
    return sum(counts)


# The counts reported as metrics (model calls are kept per record only).
_SUMMED = (
    "submitted_images",
    "unique_submitted_frames",
    "replayed_occurrences",
    "delivered_frames",
    "dropped_frames",
    "core_dropped_frames",
    "output_tokens",
    "input_tokens",
    "evicted_frames",
    "reprefill_tokens",
    "prefix_shared_images",
    "following_images",
)
# Over the records with sound (`wl_audio_n`).
_AUDIO_SUMMED = (
    "audio_streamed_s",
    "audio_chunks",
    "silent_audio_chunks",
    "audio_submitted_s",
    "audio_tokens",
)


class WorkloadFamily(MetricFamily[WorkloadResult]):
    name = "workload"
    member = "wl_n"
    constants = ("submission_kinds",)
    always_evaluated = True  # every record shows what its adapter did

    def evaluate(self, evaluation: RecordEvaluation, profile: ScoringProfile) -> WorkloadResult:
        return evaluate_workload(evaluation.trace, profile.submission_kinds)

    def fields(
        self, result: WorkloadResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> Fields:
        counts = {f"wl_{name}": number(value) for name, value in asdict(result).items()}
        audio = 1.0 if result.has_audio else math.nan
        return {"wl_n": 1.0, "wl_audio_n": audio, **counts}

    def statistics(self, profile: ScoringProfile) -> Mapping[str, Statistic]:
        sums = {name: Sum(f"wl_{name}", "wl_n", "records") for name in _SUMMED}
        share = Ratio("wl_prefix_shared_images", "wl_following_images", "images")
        audio = {name: Sum(f"wl_{name}", "wl_audio_n", "records") for name in _AUDIO_SUMMED}
        return {**sums, "prefix_share": share, **audio}

    def details(
        self, result: WorkloadResult, evaluation: RecordEvaluation, profile: ScoringProfile
    ) -> dict[str, Any]:
        entry = asdict(result)
        if not result.has_audio:
            for name in _AUDIO_SUMMED:
                del entry[name]
        return entry


WORKLOAD = WorkloadFamily()

"""The timeline a session streams: its record's, shaped by the protocol profile and the
run's configuration, and perturbed for a robustness run's perturbation copy (perturb.py)."""

from __future__ import annotations

from streameval.core.benchmark.records import QARecord
from streameval.core.config import ProtocolProfile, RunConfig
from streameval.core.frames.types import VideoFrames
from streameval.core.run.perturb_records import Perturbed, Record
from streameval.core.streams.perturb import perturb
from streameval.core.streams.timeline import (
    Timeline,
    proactive_span_s,
    proactive_timeline,
    probe_span_s,
    probe_timeline,
    qa_span_s,
    qa_timeline,
    with_audio,
)


def session_timeline(
    record: Record,
    frames: VideoFrames,
    config: RunConfig,
    profile: ProtocolProfile,
    perturbed: Perturbed | None,
) -> Timeline:
    """`perturbed`: the variant when the record is a perturbation copy, else None."""
    timeline = _clean_timeline(record, frames, config, profile)
    if perturbed is not None:
        timeline = perturb(
            timeline, perturbed.variant, config.perturb_seed, perturbed.base_record_id
        )
    # Sound follows the items as they are sent: a perturbed frame's chunks go with it.
    return with_audio(timeline, config.audio_chunk_s) if config.streams_audio else timeline


def _clean_timeline(
    record: Record, frames: VideoFrames, config: RunConfig, profile: ProtocolProfile
) -> Timeline:
    if isinstance(record, QARecord):
        return qa_timeline(
            record, frames, config.qa_history_s, with_steps=profile.frame_level_steps
        )
    if profile.probe_questions and record.probes:
        return probe_timeline(record, frames)
    return proactive_timeline(
        record,
        frames,
        lead_s=config.proactive_lead_s,
        tolerance_s=config.proactive_tolerance_s,
        steps_before_instruction=profile.frame_level_steps,
    )


def expected_stream_s(record: Record, config: RunConfig, profile: ProtocolProfile) -> float:
    """The video seconds the record's session streams, as its timeline will (before the
    video is read): the session's expected duration under wall-clock pacing, by which
    workers claim the longest sessions first (store/queue.py)."""
    if isinstance(record, QARecord):
        return qa_span_s(record, config.qa_history_s)
    if profile.probe_questions and record.probes:
        return probe_span_s(record)
    return proactive_span_s(record, config.proactive_lead_s, config.proactive_tolerance_s)

"""What one session plays: its record, its timeline and the frames to read."""

from __future__ import annotations

from dataclasses import dataclass

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.frames.audio_track import AudioTrack
from streameval.core.frames.types import VideoFrames
from streameval.core.streams.timeline import Timeline


@dataclass(frozen=True)
class SessionPlan:
    run_id: str
    session_id: str
    record: QARecord | ProactiveRecord
    timeline: Timeline
    frames: VideoFrames
    audio: AudioTrack | None = None  # the video's sound, when the run streams it

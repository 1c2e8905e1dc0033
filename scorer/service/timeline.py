"""One record's timeline, for a dashboard: frames, audio chunks, target windows, response
episodes with their onsets and assignment, false alarms, and the sound events the benchmark
record names. Runtimes are seconds since the session's first event; video times are seconds
of source video."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from streameval.scorer.episodes import assemble_one
from streameval.scorer.errors import ScoreError
from streameval.scorer.judging.judges import ExactJudge, Judge
from streameval.scorer.metrics.family import RecordEvaluation
from streameval.scorer.metrics.proactive import PROACTIVE
from streameval.scorer.metrics.record import (
    apply_judgements,
    details,
    evaluate_record,
    judge_requests,
    parse_record,
)
from streameval.scorer.profiles import ScoringProfile, get_profile, is_frame_level
from streameval.scorer.source import EventRow, RunSource


class FramePoint(BaseModel):
    index: int
    t: float
    at_s: float  # when the Core sent (or skipped) it
    lag_ms: float | None
    dropped: bool


class AudioPoint(BaseModel):
    """An audio chunk the Core sent: video time [start_t, t); `silent`: zeros standing in
    for a video without sound."""

    index: int
    start_t: float
    t: float
    at_s: float  # when the Core sent it
    lag_ms: float | None
    silent: bool


class SoundEvent(BaseModel):
    """A sound the benchmark record says the video has (ground truth), in video time."""

    start_s: float
    end_s: float
    label: str


class EpisodePoint(BaseModel):
    response_id: str
    task_id: str | None  # the task it answers: the record's own, or one of its probes
    onset_t: float | None
    onset_s: float
    final_s: float | None
    text: str
    closed: bool
    answered: bool
    assignment: str | None  # in_window | before_window, for the episode a window took
    trigger: int | None
    false_alarm: bool
    tail: bool  # after the last window began, outside every window


class RecordTimeline(BaseModel):
    run_id: str
    record_id: str
    task: str
    task_type: str
    status: str
    failure_stage: str | None
    failure_reason: str | None
    pacing: str | None
    task_t: float | None
    task_at_s: float | None
    steps_t: list[float]
    frames: list[FramePoint]
    audio: list[AudioPoint]
    sound_events: list[SoundEvent]
    windows: list[dict[str, Any]]
    episodes: list[EpisodePoint]
    result: dict[str, Any]


def record_timeline(
    source: RunSource,
    record_id: str,
    profile: ScoringProfile | str = "trace-paper-v1",
    judge: Judge | None = None,
) -> RecordTimeline:
    profile = get_profile(profile)
    data = next((r for r in source.records if r["record_id"] == record_id), None)
    if data is None:
        raise ScoreError(f"run {source.run_id!r} has no record {record_id!r}")
    record = parse_record(data)
    rows = list(source.events(record_id))
    trace = assemble_one(record_id, rows)
    evaluation = evaluate_record(record, trace, profile, is_frame_level(source.protocol))
    scores, _ = (judge or ExactJudge()).judge(judge_requests(evaluation))
    apply_judgements(evaluation, scores, profile)
    origin = rows[0][3] if rows else 0

    def since(ns: int | None) -> float | None:
        return None if ns is None else (ns - origin) / 1e9

    result = details(evaluation, profile)
    return RecordTimeline(
        run_id=source.run_id,
        record_id=record_id,
        task=record.task,
        task_type=record.task_type,
        status=evaluation.status,
        failure_stage=trace.failure_stage,
        failure_reason=trace.failure_reason,
        pacing=trace.pacing,
        task_t=trace.task_t,
        task_at_s=since(trace.task_ns),
        steps_t=trace.step_t,
        frames=_frames(rows, origin),
        audio=_audio(rows, origin),
        sound_events=_sound_events(data),
        windows=[] if result[PROACTIVE.name] is None else result[PROACTIVE.name]["windows"],
        episodes=_episodes(evaluation, profile, since),
        result=result,
    )


def _frames(rows: list[EventRow], origin: int) -> list[FramePoint]:
    frames = []
    for row in rows:
        if row[2] in ("frame_sent", "frame_dropped"):
            payload = row[5]
            lag = payload.lag_ns
            frames.append(
                FramePoint(
                    index=payload.index,
                    t=payload.t,
                    at_s=(row[3] - origin) / 1e9,
                    lag_ms=None if lag is None else lag / 1e6,
                    dropped=row[2] == "frame_dropped",
                )
            )
    return frames


def _audio(rows: list[EventRow], origin: int) -> list[AudioPoint]:
    chunks = []
    for row in rows:
        if row[2] == "audio_sent":
            payload = row[5]
            lag = payload.lag_ns
            chunks.append(
                AudioPoint(
                    index=payload.index,
                    start_t=payload.start_t,
                    t=payload.t,
                    at_s=(row[3] - origin) / 1e9,
                    lag_ms=None if lag is None else lag / 1e6,
                    silent=payload.silent,
                )
            )
    return chunks


def _sound_events(record: dict[str, Any]) -> list[SoundEvent]:
    """The sounds a record's metadata names: the synthetic benchmark's tones
    (`metadata.video.audio.tones`, each `{onset_s, end_s, hz}`); none for a record that
    names none."""
    video = (record.get("metadata") or {}).get("video") or {}
    tones = (video.get("audio") or {}).get("tones") or []
    return [
        SoundEvent(start_s=tone["onset_s"], end_s=tone["end_s"], label=f"{tone['hz']:g} Hz tone")
        for tone in tones
    ]


def _episodes(
    evaluation: RecordEvaluation,
    profile: ScoringProfile,
    since: Callable[[int | None], float | None],
) -> list[EpisodePoint]:
    proactive = evaluation.result(PROACTIVE)
    answered_at: dict[int, int] = {}  # id(episode) -> position among answered episodes
    taken: dict[int | None, tuple[str | None, int | None]] = {}  # position -> (assignment, trigger)
    if proactive is not None:
        answered_at = {id(episode): i for i, episode in enumerate(proactive.answered)}
        for outcome in proactive.windows:
            if outcome.episode is not None:
                taken[outcome.episode] = (outcome.assignment, outcome.window.trigger)
    points = []
    for episode in evaluation.trace.episodes:
        position = answered_at.get(id(episode))
        assignment, trigger = taken.get(position, (None, None))
        answered = episode.closed and profile.is_answer(episode.text)
        points.append(
            EpisodePoint(
                response_id=episode.response_id,
                task_id=episode.task_id,
                onset_t=episode.onset_t,
                onset_s=since(episode.onset_ns),
                final_s=since(episode.final_ns),
                text=episode.text,
                closed=episode.closed,
                answered=answered,
                assignment=assignment,
                trigger=trigger,
                false_alarm=position is not None and proactive.false_alarm[position],
                tail=position is not None and proactive.tail[position],
            )
        )
    return points

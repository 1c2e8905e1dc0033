"""Assemble one session's events into a trace: frames, task, steps, response episodes.

A first token (`response_start`) opens an episode; deltas append to its text (a snapshot
replaces it); `response_final` closes it and its text is the complete answer. Deltas are
kept as parts and joined once, when the session's trace is complete and only for an episode
no final closed: rebuilding the text on every delta was quadratic (40,000 deltas took 33 s).
The protocol allows one open episode at a time, so an episode still open at the end of the
log was cut off by a failure: it is kept, marked unclosed. One pass, in `seq` order, over rows whose
payloads are already typed (scorer/source.py validated them once): each event is recognised
by its payload's model and read by attribute, so a renamed field fails where the row is read,
never as a silent None here.

A session may hold several questions: besides the record's own task (task id = record id)
the Core can ask a proactive record's probes (`question_sent` with task id
`{record_id}#probe{k}`, OVO-Bench's offline protocol). Every episode keeps the task id it
answers, so each question is scored from its own episodes only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from streameval.events import (
    AdapterErrorPayload,
    AdapterHelloPayload,
    AudioAckPayload,
    AudioSentPayload,
    FrameAckPayload,
    FrameDroppedPayload,
    FrameSentPayload,
    InstructionSentPayload,
    QuestionSentPayload,
    ResponseDeltaPayload,
    ResponseFinalPayload,
    ResponseStartPayload,
    SessionFailedPayload,
    SessionFinishedPayload,
    SessionStartPayload,
    SilentPayload,
    StepSentPayload,
    WorkloadPayload,
    failure_cause,
)
from streameval.protocol import MAX_COUNT
from streameval.scorer.errors import ScoreError
from streameval.scorer.profiles import ScoringProfile
from streameval.scorer.source import EventRow


@dataclass(slots=True)
class Episode:
    response_id: str
    onset_ns: int  # first token received (Core clock)
    onset_t: float | None  # mapped onset video time
    task_id: str | None = None  # the task it answers (None: the log does not say)
    text: str = ""
    closed: bool = False
    final_ns: int | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    # Delta texts since the last snapshot (or the start), not yet in `text`.
    parts: list[str] = field(default_factory=list)
    # Characters copied to build `text` from deltas: the total length of the text of an
    # unclosed episode, 0 for a closed one (its final carries the text). Linear by design;
    # tests read it to prove that no delta rebuilds the text.
    copied_chars: int = 0

    def join_parts(self) -> None:
        """Fold the pending deltas into `text` (once per trace: see `_complete`)."""
        if self.parts:
            self.text = "".join([self.text, *self.parts])
            self.copied_chars += len(self.text)
            self.parts = []


@dataclass(slots=True)
class WorkloadTally:
    """What the adapter reported doing, per workload kind."""

    events: dict[str, int] = field(default_factory=dict)
    occurrences: dict[str, int] = field(default_factory=dict)  # image occurrences submitted
    uncounted: dict[str, int] = field(default_factory=dict)  # events with no count at all
    unlisted: dict[str, int] = field(default_factory=dict)  # events without frame ids
    frame_ids: dict[str, set[str]] = field(default_factory=dict)
    input_tokens: int | None = None
    reprefill_tokens: int | None = 0  # None once an eviction did not say
    # Model calls after a session's first: their images, and those of them at the head of
    # the prompt that the previous call shared (both None once such a call did not say).
    following_images: int | None = 0
    prefix_shared_images: int | None = 0
    # Sound the model calls took in, as reported (None: no record reported it).
    audio_seconds: float | None = None
    audio_tokens: int | None = None

    def add(self, payload: WorkloadPayload) -> None:
        kind = payload.kind
        self.events[kind] = self.events.get(kind, 0) + 1
        ids = payload.frame_ids
        count = len(ids) if ids else valid_count(payload.images)
        if count is None:
            self.uncounted[kind] = self.uncounted.get(kind, 0) + 1
        else:
            self.occurrences[kind] = self.occurrences.get(kind, 0) + count
        if ids:
            self.frame_ids.setdefault(kind, set()).update(ids)
        elif count:
            self.unlisted[kind] = self.unlisted.get(kind, 0) + 1
        tokens = valid_count(payload.input_tokens)
        if tokens is not None:
            self.input_tokens = (self.input_tokens or 0) + tokens
        seconds = valid_seconds(payload.audio_seconds)
        if seconds is not None:
            self.audio_seconds = (self.audio_seconds or 0.0) + seconds
        audio_tokens = valid_count(payload.audio_tokens)
        if audio_tokens is not None:
            self.audio_tokens = (self.audio_tokens or 0) + audio_tokens
        if kind == "model_call" and self.events[kind] > 1:
            self._add_following(count, valid_count(payload.prefix_shared_images))
        if kind == "evict":
            self.reprefill_tokens = (
                None
                if tokens is None or self.reprefill_tokens is None
                else self.reprefill_tokens + tokens
            )

    def _add_following(self, images: int | None, shared: int | None) -> None:
        if images is None or shared is None or self.following_images is None:
            self.following_images = self.prefix_shared_images = None
            return
        self.following_images += images
        self.prefix_shared_images = (self.prefix_shared_images or 0) + min(shared, images)


@dataclass(slots=True)
class AudioTally:
    """The sound the Core streamed (`audio_sent`): chunks, seconds, and those of a video
    without sound (`silent`: zeros standing in for it)."""

    chunks: int = 0
    seconds: float = 0.0
    silent_chunks: int = 0
    silent_seconds: float = 0.0

    def add(self, payload: AudioSentPayload) -> None:
        seconds = payload.samples / payload.sample_rate if payload.sample_rate > 0 else 0.0
        self.chunks += 1
        self.seconds += seconds
        if payload.silent:
            self.silent_chunks += 1
            self.silent_seconds += seconds


@dataclass(slots=True)
class SessionTrace:
    session_id: str
    pacing: str | None = None  # "logical" | "wall_clock", from session_start
    speed: float = 1.0
    adapter: AdapterHelloPayload | None = None  # the adapter's hello
    # The record's own task (question or instruction), once sent.
    task_kind: str | None = None  # "qa" | "proactive"
    task_t: float | None = None
    task_ns: int | None = None
    task_position_t: float | None = None  # the timeline's position then: the last frame sent
    probes: dict[str, int] = field(default_factory=dict)  # probe task id -> when it was sent
    frame_t: list[float] = field(default_factory=list)  # delivered frames, in order
    frame_ns: list[int] = field(default_factory=list)
    distinct_frames: int = 0  # delivered frames, each counted once (a duplicate is not new)
    last_frame_index: int = -1
    schedule: tuple[int, float] | None = None  # (scheduled_ns, t) of one scheduled frame
    core_dropped: int = 0
    step_t: list[float] = field(default_factory=list)
    silent_ns: list[int] = field(default_factory=list)  # when each silent decision arrived
    episodes: list[Episode] = field(default_factory=list)
    workload: WorkloadTally = field(default_factory=WorkloadTally)
    audio: AudioTally = field(default_factory=AudioTally)
    adapter_errors: int = 0
    status: str = "incomplete"  # finished | failed | incomplete (no outcome recorded)
    failure_stage: str | None = None
    failure_reason: str | None = None
    failure_cause: str | None = None  # infrastructure | adapter | input
    event_count: int = 0
    last_seq: int = -1

    @property
    def wall_clock(self) -> bool:
        return self.pacing == "wall_clock"

    @property
    def own_episodes(self) -> list[Episode]:
        """Episodes of the record's own task: every episode that answers no probe."""
        if not self.probes:
            return self.episodes
        return [episode for episode in self.episodes if episode.task_id not in self.probes]

    def episodes_of(self, task_id: str) -> list[Episode]:
        return [episode for episode in self.episodes if episode.task_id == task_id]

    def scheduled_ns(self, t: float) -> int | None:
        """The runtime at which video time `t` was due under wall-clock pacing."""
        if self.schedule is None:
            return None
        scheduled, t0 = self.schedule
        return scheduled + round((t - t0) / self.speed * 1e9)


def valid_count(value: int | None) -> int | None:
    """A reported count, or None (missing) when it is impossible: negative or above
    MAX_COUNT. The Core refuses such counts as it receives them; this keeps a log recorded
    before that check, or an imported one, from averaging them into the metrics."""
    return value if value is not None and 0 <= value <= MAX_COUNT else None


def valid_seconds(value: float | None) -> float | None:
    """A reported duration, or None (missing) when it is impossible (negative, above
    MAX_COUNT), as `valid_count`."""
    return value if value is not None and 0 <= value <= MAX_COUNT else None


def assemble(rows: Iterable[EventRow]) -> Iterator[SessionTrace]:
    """Traces of consecutive sessions; the rows must be ordered by (session_id, seq)."""
    trace: SessionTrace | None = None
    done: set[str] = set()
    for row in rows:
        session_id = row[0]
        if trace is None or session_id != trace.session_id:
            if trace is not None:
                done.add(trace.session_id)
                yield _complete(trace)
            if session_id in done:
                raise ScoreError(f"events of session {session_id!r} are not contiguous")
            trace = SessionTrace(session_id)
        _add(trace, row)
    if trace is not None:
        yield _complete(trace)


def _complete(trace: SessionTrace) -> SessionTrace:
    # Only an episode cut off by a failure still has parts: a final replaced the rest.
    for episode in trace.episodes:
        episode.join_parts()
    return trace


def assemble_one(session_id: str, rows: Iterable[EventRow]) -> SessionTrace:
    traces = list(assemble(rows))
    return traces[0] if traces else SessionTrace(session_id)


def _add(trace: SessionTrace, row: EventRow) -> None:
    _, seq, _, runtime_ns, video_t, payload = row
    if seq <= trace.last_seq:
        raise ScoreError(
            f"session {trace.session_id!r}: event seq {seq} after seq {trace.last_seq}"
        )
    trace.last_seq = seq
    trace.event_count += 1
    # Recognised by the payload's model (an exact type test narrows the type and is the
    # cheapest test); ordered by how often each kind occurs (frames, acks, workload, steps).
    if type(payload) is FrameSentPayload:
        trace.frame_t.append(video_t)
        trace.frame_ns.append(runtime_ns)
        # Frames go out in index order; only a duplicate repeats an index already sent.
        if payload.index > trace.last_frame_index:
            trace.distinct_frames += 1
            trace.last_frame_index = payload.index
        if trace.schedule is None and trace.wall_clock:
            _note_schedule(trace, payload)
    elif type(payload) is FrameAckPayload or type(payload) is AudioAckPayload:
        pass
    elif type(payload) is AudioSentPayload:
        trace.audio.add(payload)
    elif type(payload) is WorkloadPayload:
        trace.workload.add(payload)
    elif type(payload) is StepSentPayload:
        trace.step_t.append(video_t)
    elif type(payload) is SilentPayload:
        trace.silent_ns.append(runtime_ns)
    elif type(payload) is ResponseDeltaPayload:
        _delta(trace, payload)
    elif type(payload) is ResponseStartPayload:
        trace.episodes.append(Episode(payload.response_id, runtime_ns, video_t, payload.task_id))
    elif type(payload) is ResponseFinalPayload:
        _final(trace, runtime_ns, payload)
    elif type(payload) is FrameDroppedPayload:
        trace.core_dropped += 1
        if trace.schedule is None:
            _note_schedule(trace, payload)
    elif type(payload) is QuestionSentPayload or type(payload) is InstructionSentPayload:
        _dispatched(trace, runtime_ns, video_t, payload)
    elif type(payload) is SessionStartPayload:
        trace.pacing = payload.conditions.pacing
        trace.speed = float(payload.conditions.speed or 1.0)
    elif type(payload) is AdapterHelloPayload:
        trace.adapter = payload
    elif type(payload) is AdapterErrorPayload:
        trace.adapter_errors += 1
    elif type(payload) is SessionFinishedPayload:
        trace.status = "finished"
    elif type(payload) is SessionFailedPayload:
        trace.status = "failed"
        trace.failure_stage = payload.stage.value
        trace.failure_reason = payload.reason
        trace.failure_cause = failure_cause(payload).value
    # session_end carries nothing the metrics read.


def _dispatched(
    trace: SessionTrace,
    runtime_ns: int,
    video_t: float | None,
    payload: QuestionSentPayload | InstructionSentPayload,
) -> None:
    # A question under another task id than its record's is one of the record's probes.
    if payload.task_id != payload.record_id:
        trace.probes[payload.task_id] = runtime_ns
        return
    trace.task_kind = "qa" if isinstance(payload, QuestionSentPayload) else "proactive"
    trace.task_t = payload.t
    trace.task_ns = runtime_ns
    trace.task_position_t = video_t


def prediction(
    episodes: Sequence[Episode], dispatch_ns: int | None
) -> tuple[list[Episode], Episode | None]:
    """(episodes that began at or after a question was sent, the prediction): the
    prediction is the last of them, when it closed (one cut off by a failure is none)."""
    if dispatch_ns is None:
        return [], None
    after = [episode for episode in episodes if episode.onset_ns >= dispatch_ns]
    return after, after[-1] if after and after[-1].closed else None


def timed_answers(trace: SessionTrace, profile: ScoringProfile) -> list[Episode]:
    """Closed episodes of the record's own task that answer (`profile.is_answer`) and whose
    onset has a video time, in the order they began: the answers a metric places in time."""
    return [
        episode
        for episode in trace.own_episodes
        if episode.closed and episode.onset_t is not None and profile.is_answer(episode.text)
    ]


def _note_schedule(trace: SessionTrace, payload: FrameSentPayload | FrameDroppedPayload) -> None:
    if payload.scheduled_ns is not None:
        trace.schedule = (payload.scheduled_ns, payload.t)


def _open_episode(trace: SessionTrace, what: str) -> Episode:
    if not trace.episodes or trace.episodes[-1].closed:
        raise ScoreError(f"session {trace.session_id!r}: {what} without an open response")
    return trace.episodes[-1]


def _delta(trace: SessionTrace, payload: ResponseDeltaPayload) -> None:
    episode = _open_episode(trace, "response_delta")
    if payload.snapshot:
        episode.text = payload.text
        episode.parts = []
    else:
        episode.parts.append(payload.text)


def _final(trace: SessionTrace, runtime_ns: int, payload: ResponseFinalPayload) -> None:
    episode = _open_episode(trace, "response_final")
    episode.closed = True
    episode.final_ns = runtime_ns
    episode.text = payload.text
    episode.parts = []  # the final's text is the complete answer
    episode.output_tokens = valid_count(payload.output_tokens)
    episode.input_tokens = valid_count(payload.input_tokens)

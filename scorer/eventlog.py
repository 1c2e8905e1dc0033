"""Write event logs by hand, exactly as the Core records them.

For tests with hand-computed scores, for the scoring benchmark, and for adapter authors who
want to see how a behaviour scores. Every method appends the events the Core would record;
runtimes default to a clock that advances 1 ms per event. The events are typed
(streameval.events): a payload with a missing, renamed or mistyped field raises PayloadError
as the log is written, not when it is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.store.store import Store
from streameval.events import Event, EventKind, SessionFailedPayload, failure_cause, probe_task_id
from streameval.protocol import AUDIO_SAMPLE_BYTES, AudioConditions
from streameval.scorer.source import EventRow, RunSource

_TICK_NS = 1_000_000
# A session that streams sound: the run's declared chunks (`audio` below writes them).
_AUDIO = AudioConditions()


class SessionLog:
    def __init__(
        self,
        run_id: str,
        session_id: str,
        pacing: str = "logical",
        speed: float = 1.0,
        start_ns: int = 1_000_000_000,
    ) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.pacing = pacing
        self.speed = speed
        self.clock = start_ns
        self.video_t: float | None = None
        self.events: list[Event] = []
        self._frames = 0
        self._steps = 0
        self._responses = 0

    def _add(
        self, event_kind: EventKind, ns: int | None, video_t: float | None, **payload: Any
    ) -> int:
        self.clock = self.clock + _TICK_NS if ns is None else ns
        seq = len(self.events)
        self.events.append(
            Event(self.run_id, self.session_id, seq, event_kind, self.clock, video_t, payload)
        )
        return self.clock

    def start(
        self,
        initiation: str = "polled",
        ns: int | None = None,
        protocol: str = "trace",
        adapter_version: str = "1",
        audio: bool = False,
    ) -> SessionLog:
        self._add(
            EventKind.ADAPTER_HELLO,
            ns,
            None,
            adapter="handwritten",
            adapter_version=adapter_version,
            protocol="1",
            conditions={
                "state": "native",
                "initiation": initiation,
                "boundary": "model+adapter",
                "deployment": "in-process",
                "model_name": "handwritten",
                "model_version": "1",
                "history": "",
                "settings": {},
            },
            gpu=None,
            audio=audio,
        )
        self._add(
            EventKind.SESSION_START,
            None,
            None,
            endpoint="ws://127.0.0.1:1/ws",
            conditions={
                "profile": protocol,
                "pacing": self.pacing,
                "speed": self.speed,
                "fps": 1.0,
                "max_width": 960,
                "jpeg_quality": 90,
                "qa_history_s": 10.0,
                "proactive_lead_s": 5.0,
                "audio": _AUDIO.model_dump() if audio else None,
            },
            record_ids=[self.session_id],
        )
        return self

    def frame(
        self,
        t: float,
        ns: int | None = None,
        scheduled_ns: int | None = None,
        ack: bool = False,
        again: bool = False,
    ) -> int:
        """A delivered frame; `again`: the frame before delivered a second time, as the
        `duplicate` perturbation does (same index and id)."""
        index = self._frames - 1 if again else self._frames
        self._frames = index + 1
        self.video_t = t
        ns = self.clock + _TICK_NS if ns is None else ns
        sent = self._add(
            EventKind.FRAME_SENT,
            ns,
            t,
            index=index,
            frame_id=f"{self.session_id}:f{index}",
            t=t,
            source_t=None,
            scheduled_ns=scheduled_ns,
            lag_ns=None if scheduled_ns is None else ns - scheduled_ns,
            bytes=1000,
            width=320,
            height=240,
        )
        if ack:
            self._add(EventKind.FRAME_ACK, None, t, index=index)
        return sent

    def audio(self, index: int, silent: bool = False) -> None:
        """Audio chunk `index` (video time [index * 0.5, (index + 1) * 0.5) at 16 kHz),
        sent once the stream reached its end, then its ack."""
        chunk_s = _AUDIO.chunk_s
        t = (index + 1) * chunk_s
        samples = round(chunk_s * _AUDIO.sample_rate)
        self._add(
            EventKind.AUDIO_SENT,
            None,
            t,
            index=index,
            start_t=index * chunk_s,
            t=t,
            sample_rate=_AUDIO.sample_rate,
            samples=samples,
            bytes=AUDIO_SAMPLE_BYTES * samples,
            silent=silent,
            scheduled_ns=None,
            lag_ns=None,
        )
        self._add(EventKind.AUDIO_ACK, None, t, index=index)

    def dropped(self, t: float, scheduled_ns: int, ns: int | None = None) -> None:
        index = self._frames
        self._frames += 1
        self._add(
            EventKind.FRAME_DROPPED,
            ns,
            t,
            index=index,
            frame_id=f"{self.session_id}:f{index}",
            t=t,
            scheduled_ns=scheduled_ns,
            lag_ns=0,
        )

    def question(self, record: QARecord, ns: int | None = None) -> int:
        return self._add(
            EventKind.QUESTION_SENT,
            ns,
            self.video_t,
            task_id=record.record_id,
            record_id=record.record_id,
            t=record.question_time_s,
            text=record.question,
            options=list(record.options),
        )

    def probe(self, record: ProactiveRecord, index: int, ns: int | None = None) -> str:
        """Ask probe `index` of the record (OVO-Bench's offline protocol); its task id."""
        probe = record.probes[index]
        task_id = probe_task_id(record.record_id, index)
        self._add(
            EventKind.QUESTION_SENT,
            ns,
            self.video_t,
            task_id=task_id,
            record_id=record.record_id,
            t=probe.t,
            text=probe.question,
            options=list(probe.options),
        )
        return task_id

    def instruction(self, record: ProactiveRecord, ns: int | None = None) -> int:
        return self._add(
            EventKind.INSTRUCTION_SENT,
            ns,
            self.video_t,
            task_id=record.record_id,
            record_id=record.record_id,
            t=record.instruction_time_s,
            text=record.instruction,
        )

    def step(self, ns: int | None = None) -> None:
        step = self._steps
        self._steps += 1
        self._add(
            EventKind.STEP_SENT,
            ns,
            self.video_t,
            task_id=self.session_id,
            step=step,
            t=self.video_t,
        )

    def silent(self, ns: int | None = None, task_id: str | None = None) -> None:
        """A silent decision: at the last step, or (`task_id`) declining that question."""
        step = None if task_id is not None else self._steps - 1
        self._add(EventKind.SILENT, ns, self.video_t, task_id=task_id or self.session_id, step=step)

    def respond(
        self,
        text: str,
        onset_ns: int | None = None,
        onset_t: float | None = None,
        final_ns: int | None = None,
        output_tokens: int | None = 1,
        input_tokens: int | None = None,
        deltas: Sequence[str] | None = None,
        close: bool = True,
        task_id: str | None = None,
    ) -> str:
        """One response episode: start, its deltas (default: the whole text), final. It
        answers the record's own task, or the question `task_id` (a probe)."""
        response_id = f"r{self._responses}"
        self._responses += 1
        onset_t = self.video_t if onset_t is None else onset_t
        self._add(
            EventKind.RESPONSE_START,
            onset_ns,
            onset_t,
            response_id=response_id,
            task_id=task_id or self.session_id,
        )
        for seq, part in enumerate([text] if deltas is None else deltas):
            self._add(
                EventKind.RESPONSE_DELTA,
                None,
                onset_t,
                response_id=response_id,
                seq=seq,
                text=part,
                snapshot=False,
            )
        if close:
            self._add(
                EventKind.RESPONSE_FINAL,
                final_ns,
                onset_t,
                response_id=response_id,
                text=text,
                output_tokens=output_tokens,
                input_tokens=input_tokens,
            )
        return response_id

    def workload(
        self,
        frame_ids: Sequence[str] = (),
        kind: str = "model_call",
        images: int | None = None,
        input_tokens: int | None = None,
        prefix_shared_images: int | None = None,
        audio_seconds: float | None = None,
        audio_tokens: int | None = None,
    ) -> None:
        self._add(
            EventKind.WORKLOAD,
            None,
            self.video_t,
            kind=kind,
            frame_ids=list(frame_ids),
            images=len(frame_ids) if images is None and frame_ids else images,
            pixels=None,
            replayed_frames=None,
            prefix_shared_images=prefix_shared_images,
            audio_seconds=audio_seconds,
            audio_tokens=audio_tokens,
            input_tokens=input_tokens,
            output_tokens=None,
            started_ns=None,
            ended_ns=None,
        )

    def rows(self) -> list[EventRow]:
        """The events as the scorer reads them."""
        return [
            (e.session_id, e.seq, e.kind, e.runtime_ns, e.video_t, e.payload) for e in self.events
        ]

    def frame_id(self, index: int) -> str:
        return f"{self.session_id}:f{index}"

    def finish(self) -> list[Event]:
        self._add(EventKind.SESSION_END, None, self.video_t, reason="complete")
        self._add(EventKind.SESSION_FINISHED, None, self.video_t)
        return self.events

    def fail(
        self, stage: str = "response", reason: str = "no answer within 60s", cause: str = ""
    ) -> list[Event]:
        """The session fails; `cause` defaults to what the Core gives that stage."""
        cause = cause or failure_cause({"stage": stage, "reason": reason})
        self._add(
            EventKind.SESSION_FAILED, None, self.video_t, stage=stage, reason=reason, cause=cause
        )
        return self.events


def asked_session(
    record: QARecord, answer: str | None, frames_s: Sequence[float], protocol: str = "trace"
) -> SessionLog:
    """A finished QA session: the frames, the question, then `answer` (None: declined)."""
    log = SessionLog("run", record.record_id).start(protocol=protocol)
    for t in frames_s:
        log.frame(float(t))
    log.question(record)
    if answer is None:
        log.silent(task_id=record.record_id)
    else:
        log.respond(answer)
    log.finish()
    return log


def store_run(
    store: Store,
    run_id: str,
    records: Sequence[QARecord | ProactiveRecord],
    logs: Sequence[SessionLog],
    config: dict[str, Any] | None = None,
    status: str = "finished",
    benchmark: str = "handwritten",
) -> None:
    """Create a run holding these records and sessions' events, as the Core would."""
    strays = sorted({log.run_id for log in logs} - {run_id})
    if strays:
        raise ValueError(f"logs of run(s) {strays} cannot be stored in run {run_id!r}")
    store.create_run(run_id, benchmark, config or {"profile": "trace", "pacing": "logical"})
    store_logs(store, run_id, records, logs)
    store.set_run_status(run_id, status)


def store_logs(
    store: Store,
    run_id: str,
    records: Sequence[QARecord | ProactiveRecord],
    logs: Sequence[SessionLog],
) -> None:
    """Add these records, one session each, and the sessions' events to a created run (a
    large run is stored a part at a time this way)."""
    store.add_records(run_id, [record.model_dump(mode="json") for record in records])
    store.add_sessions(run_id, [(record.record_id, [record.record_id]) for record in records])
    for log in logs:
        store.append_events(log.events)
        outcome = log.events[-1].payload if log.events else None
        if log.events and log.events[-1].kind == EventKind.SESSION_FINISHED:
            store.set_session_status(run_id, log.session_id, "finished")
        elif isinstance(outcome, SessionFailedPayload):
            store.set_session_status(
                run_id, log.session_id, "failed", stage=outcome.stage, reason=outcome.reason
            )


def memory_source(
    records: Sequence[QARecord | ProactiveRecord],
    logs: Sequence[SessionLog],
    run_id: str = "handwritten",
    status: str = "finished",
    config: dict[str, Any] | None = None,
) -> RunSource:
    """A run held in memory, to score without a store."""
    rows = sorted((row for log in logs for row in log.rows()), key=lambda row: (row[0], row[1]))
    run = {
        "run_id": run_id,
        "status": status,
        "benchmark": "handwritten",
        "config": config or {"profile": "trace", "pacing": "logical"},
        "config_hash": "",
        "conditions": {},
        "versions": {},
    }

    def events(session_id: str | None = None) -> list[EventRow]:
        return [row for row in rows if session_id is None or row[0] == session_id]

    return RunSource(run, [record.model_dump(mode="json") for record in records], events)

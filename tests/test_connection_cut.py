"""A connection cut in the middle of a session: the Core drops the socket at a `cut` item of
the timeline, reconnects and resumes the session where the adapter can.

Real components: the Core's session driver on a real video (the synthetic benchmark's count
video, through the frame cache), adapters as their own processes over WebSocket. What the
adapter kept is read from what it says: the reference adapter, told at 2 s to say the
number of circles whenever it changes, says the counts after the cut only if it still
holds the instruction.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import pytest
from websockets.asyncio.client import connect

from streameval.adapters.reference import ReferenceAdapter
from streameval.adapters.sdk import Adapter, Frame, Responder, Session
from streameval.adapters.server import serve
from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.benchmark.synthetic import generate
from streameval.core.config import PROTOCOL_PROFILES
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.types import ImageRules, VideoFrames
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.core.session.driver import SessionDriver, SessionOutcome
from streameval.core.session.protocol_state import Awaited, ProtocolState, Resolution
from streameval.core.store.store import EventRow, Store
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import Timeline, TimelineItem, proactive_timeline, qa_timeline
from streameval.events import Event, EventKind
from streameval.protocol import (
    FEATURES_HEADER,
    WS_PATH,
    AdapterConditions,
    FrameAck,
    Hello,
    Question,
    ResponseStart,
    RunConditions,
    SessionResumed,
    SessionStart,
    parse_adapter_message,
    parse_core_message,
)
from tests.recording import reading_into
from tests.test_cli import streameval

RECORD_ID = "synthetic:proactive:001"  # circles counted from 2 s; changes at 5.1 s, 10.9 s, ...
CUT_T = 4.0  # after the instruction, before the first change
LAST_T = 12.0  # the timeline is cut short after the second change


class ResumelessReferenceAdapter(ReferenceAdapter):
    """The reference adapter without the resume capability (as an adapter that predates it)."""

    name = "reference-resumeless"
    resume_grace_s = 0.0


class ForgetfulReferenceAdapter(ReferenceAdapter):
    """The reference adapter keeping a lost session only 0.2 s."""

    name = "reference-forgetful"
    resume_grace_s = 0.2


class SlowAnswerAdapter(Adapter):
    """Starts its answer at once and finishes it 1 s later: an answer in flight at a cut."""

    name = "slow-answer"
    conditions = AdapterConditions(state="native", initiation="polled", model_name="test")

    async def on_frame(self, session: Session, frame: Frame) -> None:
        session.state["frames"] = session.state.get("frames", 0) + 1

    async def on_question(self, session: Session, question: Question, respond: Responder):
        response = respond.stream()
        await response.token("A")
        await asyncio.sleep(1.0)
        await response.finish()


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("synthetic")
    benchmark = generate(out)
    frames = FrameCache(out / "cache").get(out / "videos" / "v4_count.mp4", ImageRules())
    records = {record.record_id: record for record in benchmark.records}
    return records, frames, out


def conditions(pacing: str = "logical", speed: float = 1.0) -> RunConditions:
    return RunConditions(
        profile="trace",
        pacing=pacing,  # type: ignore[arg-type]
        speed=speed,
        fps=1.0,
        max_width=960,
        jpeg_quality=90,
        qa_history_s=10.0,
        proactive_lead_s=5.0,
    )


def counting_timeline(record: ProactiveRecord, frames: VideoFrames, cut: bool) -> Timeline:
    """Frames from 0 s, the instruction at 2 s, a step after every frame, up to 12 s; with
    `cut`, a cut after the step at 4 s."""
    whole = proactive_timeline(record, frames, lead_s=5.0, tolerance_s=5.0)
    items: list[TimelineItem] = []
    for item in whole.items:
        if item.t > LAST_T:
            break
        items.append(item)
        if cut and item.kind == "step" and item.t == CUT_T:
            items.append(TimelineItem("cut", CUT_T))
    return Timeline(record.record_id, "proactive", tuple(items))


def play(
    url: str,
    record: ProactiveRecord | QARecord,
    timeline: Timeline,
    frames: VideoFrames,
    *,
    pacing: str = "logical",
    speed: float = 1.0,
    at_cut: Callable[[], None] = lambda: None,
) -> tuple[SessionOutcome, list[Event]]:
    """One session of the Core; `at_cut` runs when the cut is recorded."""
    events: list[Event] = []
    read = reading_into(events)

    def sink(row: EventRow) -> None:
        read(row)
        if events[-1].kind == EventKind.CONNECTION_CUT:
            at_cut()

    plan = SessionPlan("run-cut", record.record_id, record, timeline, frames)
    driver = SessionDriver(
        plan,
        endpoint_url=url,
        conditions=conditions(pacing, speed),
        profile=PROTOCOL_PROFILES["trace"],
        response_timeout_s=10.0,
        connect_timeout_s=5.0,
        sink=sink,
    )
    return asyncio.run(driver.run()), events


def said(events: list[Event]) -> list[tuple[float, str]]:
    """(video time of the step, text) of every response."""
    return [(e.video_t, e.payload.text) for e in events if e.kind == EventKind.RESPONSE_FINAL]


def expected_kinds(timeline: Timeline, answers: dict[float, str]) -> list[str]:
    """The events of a reference adapter session: it reports a workload for every frame and
    answers a step with a response where `answers` has one, else with silence."""
    kinds = ["adapter_hello", "session_start"]
    for item in timeline.items:
        if item.kind == "frame":
            kinds += ["frame_sent", "workload", "frame_ack"]
        elif item.kind == "instruction":
            kinds.append("instruction_sent")
        elif item.kind == "cut":
            kinds += ["connection_cut", "session_resumed"]
        elif item.t in answers:
            kinds += ["step_sent", "response_start", "response_delta", "response_final"]
        else:
            kinds += ["step_sent", "silent"]
    return [*kinds, "session_end", "session_finished"]


def payload(events: list[Event], kind: EventKind) -> dict:
    (event,) = [e for e in events if e.kind == kind]
    return event.payload.model_dump()


# --------------------------------------------------------------------------- resume


def test_the_reference_adapter_resumes_its_state_after_a_cut(synthetic, adapter_env):
    records, frames, _ = synthetic
    record = records[RECORD_ID]
    with AdapterProcess("reference") as adapter:
        clean, clean_events = play(
            adapter.url, record, counting_timeline(record, frames, False), frames
        )
        cut_timeline = counting_timeline(record, frames, True)
        outcome, events = play(adapter.url, record, cut_timeline, frames)

    # Without a cut, the counts at the first two changes (5.1 s and 10.9 s), at the next step.
    counts = {6.0: record.triggers[0].answer, 11.0: record.triggers[1].answer}
    assert (clean.status, said(clean_events)) == ("finished", sorted(counts.items()))
    # With the cut, the same: the adapter still held the instruction it got before the cut.
    assert outcome.status == "finished"
    assert said(events) == sorted(counts.items())
    assert [e.kind.value for e in events] == expected_kinds(cut_timeline, counts)
    assert [e.seq for e in events] == list(range(len(events)))
    assert payload(events, EventKind.CONNECTION_CUT) == {
        "t": CUT_T,
        "last_frame_index": 4,
        "open_response": None,
    }
    resumed = payload(events, EventKind.SESSION_RESUMED)
    assert (resumed["supported"], resumed["resumed"]) == (True, True)
    cut, back = (
        e for e in events if e.kind in (EventKind.CONNECTION_CUT, EventKind.SESSION_RESUMED)
    )
    assert resumed["reconnect_ns"] == back.runtime_ns - cut.runtime_ns > 0
    # The frames after the cut are the timeline's: none is sent twice, none is skipped.
    sent = [e.payload.t for e in events if e.kind == EventKind.FRAME_SENT]
    assert sent == [float(t) for t in range(0, 13)]


def test_an_adapter_without_resume_goes_on_with_a_fresh_state(synthetic, adapter_env):
    records, frames, _ = synthetic
    record = records[RECORD_ID]
    timeline = counting_timeline(record, frames, True)
    with AdapterProcess("tests.test_connection_cut:ResumelessReferenceAdapter") as adapter:
        outcome, events = play(adapter.url, record, timeline, frames)

    # The fresh state holds no instruction: the model lost its context, it says nothing.
    assert (outcome.status, said(events)) == ("finished", [])
    assert [e.kind.value for e in events] == expected_kinds(timeline, {})
    resumed = payload(events, EventKind.SESSION_RESUMED)
    assert (resumed["supported"], resumed["resumed"]) == (False, False)


def test_a_session_kept_past_its_grace_period_starts_fresh(synthetic, adapter_env):
    """The adapter resumes sessions, but the reconnect comes after it dropped this one."""
    records, frames, _ = synthetic
    record = records[RECORD_ID]
    timeline = counting_timeline(record, frames, True)
    with AdapterProcess("tests.test_connection_cut:ForgetfulReferenceAdapter") as adapter:
        # Blocks the Core's loop past the adapter's 0.2 s grace before it reconnects.
        outcome, events = play(
            adapter.url, record, timeline, frames, at_cut=lambda: time.sleep(0.6)
        )

    assert (outcome.status, said(events)) == ("finished", [])
    assert [e.kind.value for e in events] == expected_kinds(timeline, {})
    resumed = payload(events, EventKind.SESSION_RESUMED)
    assert (resumed["supported"], resumed["resumed"]) == (True, False)
    assert resumed["reconnect_ns"] >= 600_000_000


def test_an_adapter_gone_after_the_cut_fails_the_session_in_one_line(synthetic, adapter_env):
    records, frames, _ = synthetic
    record = records[RECORD_ID]
    timeline = counting_timeline(record, frames, True)
    with AdapterProcess("reference") as adapter:
        outcome, events = play(adapter.url, record, timeline, frames, at_cut=adapter.kill)

    assert (outcome.status, outcome.stage, outcome.cause) == (
        "failed",
        "streaming",
        "infrastructure",
    )
    prefix = f"connection cut at 4s: reconnect failed: cannot connect to {adapter.url}: "
    assert outcome.reason is not None and outcome.reason.startswith(prefix), outcome.reason
    assert "\n" not in outcome.reason
    # Everything up to the cut is kept; nothing is recorded lost but the session.
    before_cut = expected_kinds(timeline, {})
    before_cut = before_cut[: before_cut.index("connection_cut") + 1]
    assert [e.kind.value for e in events] == [*before_cut, "session_failed"]
    assert payload(events, EventKind.SESSION_FAILED)["reason"] == outcome.reason


# --------------------------------------------------------------------------- wall clock


def test_under_wall_clock_the_schedule_runs_on_through_the_cut(synthetic, adapter_env):
    records, frames, _ = synthetic
    record = records[RECORD_ID]
    timeline = counting_timeline(record, frames, True)
    with AdapterProcess("reference") as adapter:
        outcome, events = play(
            adapter.url, record, timeline, frames, pacing="wall_clock", speed=4.0
        )

    assert outcome.status == "finished"
    resumed = payload(events, EventKind.SESSION_RESUMED)
    assert (resumed["supported"], resumed["resumed"]) == (True, True)
    frames_out = [e for e in events if e.kind in (EventKind.FRAME_SENT, EventKind.FRAME_DROPPED)]
    first = frames_out[0].payload
    # One schedule from the stream's start: the reconnect did not restart the clock.
    for event in frames_out:
        offset = int((event.payload.t - first.t) / 4.0 * 1e9)
        assert event.payload.scheduled_ns == first.scheduled_ns + offset
    back = next(e for e in events if e.kind == EventKind.SESSION_RESUMED)
    after = [e for e in frames_out if e.seq > back.seq]
    assert [e.payload.t for e in after] == [float(t) for t in range(5, 13)]


def test_an_answer_in_flight_at_the_cut_is_recorded_as_cut(synthetic, adapter_env):
    """Wall clock: the question at 5 s, the cut at 5.1 s while the answer streams."""
    records, frames, _ = synthetic
    question = QARecord(
        record_id="cut:qa",
        source_id="cut:qa",
        source_benchmark="test",
        task_type="present",
        video_path="videos/v4_count.mp4",
        question="How many circles?",
        options=("A. 1", "B. 2"),
        answer="A",
        question_time_s=5.0,
        evidence_anchor_s=5.0,
    )
    whole = qa_timeline(question, frames, history_s=0.0)
    later = [TimelineItem("frame", ref.t, ref) for ref in frames.between(6.0, 8.0)]
    timeline = Timeline(question.record_id, "qa", (*whole.items, TimelineItem("cut", 5.1), *later))
    with AdapterProcess("tests.test_connection_cut:SlowAnswerAdapter") as adapter:
        outcome, events = play(adapter.url, question, timeline, frames, pacing="wall_clock")

    assert outcome.status == "finished"
    kinds = [e.kind.value for e in events]
    start = kinds.index("response_start")
    assert kinds[start : start + 4] == [
        "response_start",
        "response_delta",
        "connection_cut",
        "session_resumed",
    ]
    assert "response_final" not in kinds
    response_id = events[start].payload.response_id
    assert payload(events, EventKind.CONNECTION_CUT) == {
        "t": 5.1,
        "last_frame_index": 5,
        "open_response": response_id,
    }
    # The adapter finished its hook on the cut connection, then resumed the session.
    resumed = payload(events, EventKind.SESSION_RESUMED)
    assert (resumed["supported"], resumed["resumed"]) == (True, True)


# --------------------------------------------------------------------------- wire


@pytest.mark.parametrize(("features", "declared"), [(None, None), ("resume", True)])
async def test_the_sdk_declares_resume_only_to_a_core_that_announced_it(features, declared):
    """An older Core refuses unknown hello fields: it gets the hello it always got."""
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(serve(ReferenceAdapter(), port=0, ready=ready.set_result))
    try:
        headers = {} if features is None else {FEATURES_HEADER: features}
        url = f"ws://127.0.0.1:{await ready}{WS_PATH}"
        async with connect(url, compression=None, additional_headers=headers) as ws:
            hello = json.loads(await ws.recv())
    finally:
        serving.cancel()
    assert hello.get("resume") == declared
    assert Hello.model_validate(hello).resume is (declared is True)


def test_a_core_without_the_feature_gets_a_hello_without_resume():
    """Messages refuse unknown fields: the new fields go out only when set."""
    start = SessionStart(
        run_id="r", session_id="s", record_ids=["r1"], conditions=conditions()
    ).model_dump_json()
    assert "resume" not in json.loads(start)
    hello = Hello(
        adapter="a",
        conditions=AdapterConditions(state="native", initiation="polled", model_name="m"),
    )
    assert "resume" not in json.loads(hello.model_dump_json())
    resumable = json.loads(hello.model_copy(update={"resume": True}).model_dump_json())
    assert resumable["resume"] is True
    assert parse_core_message(start).resume is None
    assert parse_adapter_message('{"type":"session_resumed","resumed":false}').resumed is False


def test_the_state_machine_takes_a_new_hello_and_the_resume_answer_after_a_cut():
    hello = Hello(
        adapter="a",
        conditions=AdapterConditions(state="native", initiation="polled", model_name="m"),
    )
    state = ProtocolState()
    assert state.accept(hello, 1, None).record is not None  # adapter_hello, recorded once
    state.task_sent("q")
    state.accept(ResponseStart(response_id="r1", task_id="q"), 2, None)
    unasked = state.accept(SessionResumed(resumed=True), 3, None).violation
    assert unasked is not None and str(unasked) == (
        "out_of_order: session_resumed without a resuming session_start"
    )

    assert state.reconnected() == "r1"  # the response in flight is cut
    assert str(state.accept(FrameAck(index=0), 4, None).violation) == (
        "out_of_order: frame_ack before hello"
    )
    again = state.accept(hello, 5, None)
    assert (again.record, again.violation) == (None, None)
    state.resume_sent()
    answered = state.accept(SessionResumed(resumed=False), 6, None)
    assert (answered.resolves, state.resumed) == (Resolution(Awaited.RESUMED), False)
    # The cut response is closed: a new one may start.
    assert state.accept(ResponseStart(response_id="r2", task_id="q"), 7, None).violation is None


# --------------------------------------------------------------------------- end to end


def test_a_cut_perturbation_run_resumes_every_cut_session(benchmark_path, tmp_path, adapter_env):
    """`streameval run --perturb cut:at=10`: each record again, its connection cut at 10 s."""
    store_url = f"sqlite:///{tmp_path / 's.db'}"
    with AdapterProcess("reference") as adapter:
        ran = streameval(
            "run", "--adapter-url", adapter.url, "--benchmark", str(benchmark_path),
            "--task", "qa", "--perturb", "cut:at=10", "--json", "--store", store_url,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    run_id = json.loads(ran.stdout)["run_id"]
    with Store(store_url) as store:
        sessions = {s.session_id: s.status for s in store.sessions(run_id)}
        events = list(store.iter_events(run_id))
    # The cut copy of t:qa:1 streams 5..17 s, cut after the frame at 10 s; that of t:qa:2
    # streams 0..6 s: its cut comes after its last frame, before the question.
    assert set(sessions.values()) == {"finished"} and len(sessions) == 4
    cuts = {e.session_id: e.payload.model_dump() for e in events if e.kind == "connection_cut"}
    resumed = {e.session_id: e.payload for e in events if e.kind == "session_resumed"}
    assert sorted(cut["t"] for cut in cuts.values()) == [10.0, 10.0]
    assert sorted(cut["last_frame_index"] for cut in cuts.values()) == [6, 10]
    assert set(resumed) == set(cuts) and all(r.resumed and r.supported for r in resumed.values())
    assert not set(cuts) & {"t:qa:1", "t:qa:2"}  # the clean copies run uncut

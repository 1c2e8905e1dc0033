"""Adapters that exist only for tests. They run as real WebSocket services in their own
processes (`python -m streameval.adapters tests.wire_adapters:Name --port 0`) and either
misbehave on the wire in one precise way or read ground truth. None of this ships.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from streameval.adapters.reference import ReferenceAdapter
from streameval.adapters.sdk import Adapter, Frame, Responder, Session
from streameval.protocol import AdapterConditions, Instruction, Question, Step

_POLLED = AdapterConditions(state="native", initiation="polled", model_name="test")


class LoggingAdapter(Adapter):
    """Logs every message it receives (kind, video time, arrival clock) as JSON lines to
    $STREAMEVAL_TEST_LOG/<session>.jsonl, then answers "A" / stays silent."""

    name = "logging"
    conditions = _POLLED

    def _log(self, session: Session, kind: str, t: float | None) -> None:
        path = os.path.join(os.environ["STREAMEVAL_TEST_LOG"], f"{session.session_id}.jsonl")
        with open(path, "a") as handle:
            handle.write(json.dumps({"kind": kind, "t": t, "ns": time.monotonic_ns()}) + "\n")

    async def on_session_start(self, session: Session) -> None:
        self._log(session, "session_start", None)

    async def on_frame(self, session: Session, frame: Frame) -> None:
        self._log(session, "frame", frame.t)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        self._log(session, "question", question.t)
        await respond.say("A")

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        self._log(session, "instruction", instruction.t)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        self._log(session, "step", step.t)
        await respond.silent(step.step)


class InstantAdapter(Adapter):
    """Answers instantly and does nothing else: measures the harness itself."""

    name = "instant"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say("A")


class HangingAdapter(Adapter):
    """Acknowledges frames but never answers a question nor decides a step."""

    name = "hanging"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await asyncio.sleep(3600)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await asyncio.sleep(3600)


class CrashingAdapter(Adapter):
    """Dies (the whole process, as a segfault or an OOM kill would) at the first question."""

    name = "crashing"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        os._exit(3)

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        os._exit(3)


class GarbageAdapter(Adapter):
    """Answers a question with bytes that are not JSON."""

    name = "garbage"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await session.send("{this is not json")

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        await session.send("{this is not json")


class OutOfOrderAdapter(Adapter):
    """Streams a delta for a response it never started."""

    name = "out-of-order"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        delta = {"type": "response_delta", "response_id": "never-started", "seq": 0, "text": "A"}
        await session.send(json.dumps(delta))

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        await self.on_question(session, None, respond)  # type: ignore[arg-type]


class OversizedAdapter(Adapter):
    """Answers with one message larger than the protocol's limit."""

    name = "oversized"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        # Raw, because the SDK itself refuses to build a text over the protocol's limit.
        start = {"type": "response_start", "response_id": "big", "task_id": question.task_id}
        await session.send(json.dumps(start))
        delta = {"type": "response_delta", "response_id": "big", "seq": 0}
        await session.send(json.dumps({**delta, "text": "A" * (9 * 1024 * 1024)}))


class AutonomousAdapter(Adapter):
    """Declares autonomous initiation (to test the Core's profile check)."""

    name = "autonomous-stateless"
    conditions = AdapterConditions(state="non-native", initiation="autonomous", model_name="t")


class EarlyAdapter(Adapter):
    """Decides before it was asked anything: a silent decision on the first frame."""

    name = "early"
    conditions = _POLLED

    async def on_frame(self, session: Session, frame: Frame) -> None:
        await session.send(json.dumps({"type": "silent", "task_id": "t:qa:1", "step": None}))


class ScriptedAdapter(Adapter):
    """Says what a script tells it: $STREAMEVAL_TEST_SCRIPT is a JSON file mapping each task
    id to {"answer": text or null (decline the question), "steps": [[t, text], ...]}. At a
    step, the earliest scripted text due at or before the step's video time is said (one per
    step); otherwise the step is declined."""

    name = "scripted"
    conditions = _POLLED
    # It answers from its script alone, so a run with sound (StreamingBench's omni-source
    # tasks) takes it as it is.
    consumes_audio = True

    def __init__(self) -> None:
        with open(os.environ["STREAMEVAL_TEST_SCRIPT"]) as handle:
            self.script = json.load(handle)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        text = self.script[question.task_id]["answer"]
        if text is None:
            await respond.silent()
        else:
            await respond.say(text)

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        session.state["due"] = sorted(self.script[instruction.task_id]["steps"])

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        due = session.state.get("due") or []
        if due and due[0][0] <= step.t:
            await respond.say(due.pop(0)[1])
        else:
            await respond.silent(step.step)


class SlowReferenceAdapter(ReferenceAdapter):
    """The reference adapter taking 20 ms per frame: sessions long enough to kill a worker
    in the middle of one, with the reference adapter's answers."""

    name = "slow-reference"

    async def on_frame(self, session: Session, frame: Frame) -> None:
        await asyncio.sleep(0.02)
        await super().on_frame(session, frame)


class GpuReportingAdapter(InstantAdapter):
    """Names the accelerator it serves from, as a model adapter on a GPU does."""

    name = "gpu-reporting"

    def gpu_identity(self) -> str | None:
        return "Test Accelerator GPU-0123"


class GatedAdapter(LoggingAdapter):
    """`LoggingAdapter` whose sessions start only once the file $STREAMEVAL_TEST_GATE exists:
    a test changes something while a run's first session is held, before the next starts."""

    name = "gated"

    async def on_session_start(self, session: Session) -> None:
        await super().on_session_start(session)
        while not os.path.exists(os.environ["STREAMEVAL_TEST_GATE"]):
            await asyncio.sleep(0.02)


class AbandonedCallAdapter(Adapter):
    """Starts a "model call" at every question that never ends on its own, and logs to
    $STREAMEVAL_TEST_LOG/<session>.jsonl when the call began, when it was cancelled and
    whether a workload sent after the cancellation got out, and when its cleanup hook
    (which itself awaits) began and finished. Resumable, so a lost connection keeps the
    session: the cancellation must not wait for that."""

    name = "abandoned-call"
    conditions = _POLLED
    resume_grace_s = 600.0

    def _log(self, session: Session, kind: str, **fields: object) -> None:
        path = os.path.join(os.environ["STREAMEVAL_TEST_LOG"], f"{session.session_id}.jsonl")
        with open(path, "a") as handle:
            handle.write(json.dumps({"kind": kind, "ns": time.monotonic_ns(), **fields}) + "\n")

    async def on_question(self, session: Session, question: Question, respond: Responder):
        self._log(session, "call")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self._log(session, "cancelled")
            try:
                await session.workload(frame_ids=[], images=0)
            except Exception as exc:  # the connection is gone: nothing gets out
                self._log(session, "send_refused", error=type(exc).__name__)
            else:
                self._log(session, "sent")
            raise

    async def on_session_end(self, session: Session) -> None:
        self._log(session, "cleanup_begins")
        await asyncio.sleep(0.2)
        self._log(session, "cleanup_done")


class HugeSettingsAdapter(InstantAdapter):
    """Declares 7 MB of settings: every hello would carry them."""

    conditions = _POLLED.model_copy(update={"settings": {"prompt": "x" * 7_000_000}})


class NeverReadyAdapter(InstantAdapter):
    """Listens but never finishes loading: `/healthz` answers 503 `loading` for good."""

    name = "never-ready"

    async def start(self) -> None:
        await asyncio.Event().wait()


class CacheWatchingAdapter(InstantAdapter):
    """Starts each session only once the frame cache under $STREAMEVAL_TEST_CACHE holds
    $STREAMEVAL_TEST_ENTRIES decoded videos (or after 30 s): a worker's first session is
    held while it decodes the next sessions' videos ahead, if it does."""

    name = "cache-watching"

    async def on_session_start(self, session: Session) -> None:
        root = os.environ["STREAMEVAL_TEST_CACHE"]
        wanted = int(os.environ["STREAMEVAL_TEST_ENTRIES"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            entries = sum("index.json" in files for _, _, files in os.walk(root))
            if entries >= wanted:
                return
            await asyncio.sleep(0.02)

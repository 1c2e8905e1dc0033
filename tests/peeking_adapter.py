"""Adapters of the causality audit's tests (tests/test_causality_audit.py), served as real
WebSocket services in their own processes (`python -m streameval.adapters
tests.peeking_adapter:Name --port 0`). None of this ships.

`PeekingAdapter` cheats the way the audit must catch: it is given the store the run is
recorded in (`-A store=...`, as an adapter running on the evaluation machine could find
it; the audit writes no benchmark file), looks its session's record up there, opens that
record's video file itself and, at every question and step, says how bright the frame
`lookahead_s` ahead is.

`RememberingAdapter` never reads a file: it remembers the frames it was shown in earlier
runs, recognises a video by its first frame and says whether it remembers a brighter frame
ahead. `FlakyAdapter` is honest and nearly deterministic: each output differs at random
with probability `p`, from its own random generator.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import av
import numpy as np
from pydantic import BaseModel

from streameval.adapters.reference import ReferenceAdapter
from streameval.adapters.sdk import Adapter, Frame, Responder, Session
from streameval.core.store.store import Store
from streameval.protocol import AdapterConditions, Question, Step

_POLLED = AdapterConditions(state="native", initiation="polled", model_name="test")


class PeekingOptions(BaseModel):
    store: str  # the URL of the store the run is recorded in
    lookahead_s: float = 10.0


class PeekingAdapter(Adapter):
    """Answers with the mean brightness of the frame `lookahead_s` ahead of the Core's."""

    name = "peeking"
    conditions = _POLLED
    Config = PeekingOptions

    def __init__(self, options: PeekingOptions) -> None:
        self.options = options

    async def on_session_start(self, session: Session) -> None:
        with Store(self.options.store, read_only=True) as store:
            root = store.get_run(session.run_id).config["video_root"]
            (record,) = [
                r for r in store.records(session.run_id) if r["record_id"] in session.record_ids
            ]
        with av.open(str(Path(root) / record["video_path"])) as container:
            session.state["brightness"] = [
                (float(frame.time), float(np.mean(frame.to_ndarray(format="gray"))))
                for frame in container.decode(video=0)
            ]

    def _ahead(self, session: Session, t: float) -> str:
        frames = session.state["brightness"]
        wanted = t + self.options.lookahead_s
        _, brightness = next((f for f in frames if f[0] >= wanted - 1e-6), frames[-1])
        return f"brightness ahead {brightness:.2f}"

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say(self._ahead(session, question.t))

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await respond.say(self._ahead(session, step.t))


class RandomAdapter(Adapter):
    """Honest but nondeterministic: a random option, a random number or silence."""

    name = "random"
    conditions = _POLLED

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say(random.choice("ABCDE"))

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        if random.random() < 0.5:
            await respond.silent(step.step)
        else:
            await respond.say(str(random.randint(0, 9)))


# The band of the frame (as fractions of its height) where the audit's marker is written
# and no shape ever is; its mean luma is 17 without the marker and above 35 with it.
_BAND = (172 / 240, 190 / 240)
_TEXT_LUMA = 27.0


class RememberingAdapter(Adapter):
    """Recognises a stream by its first frame among those of earlier runs and says whether
    a remembered frame ahead holds bright text; honest about the present, it only ever
    uses what it was shown."""

    name = "remembering"
    conditions = _POLLED

    def __init__(self) -> None:
        # Every session shown, across runs: (run id, frame digests, [(t, band luma)]).
        self.memory: list[tuple[str, set[str], list[tuple[float, float]]]] = []

    async def on_session_start(self, session: Session) -> None:
        seen: tuple[str, set[str], list[tuple[float, float]]] = (session.run_id, set(), [])
        session.state["seen"] = seen
        self.memory.append(seen)

    async def on_frame(self, session: Session, frame: Frame) -> None:
        _, digests, frames = session.state["seen"]
        if not digests:
            session.state["first"] = hashlib.sha256(frame.data).hexdigest()
        gray = frame.rgb().mean(axis=2)
        top, bottom = (round(f * gray.shape[0]) for f in _BAND)
        digests.add(hashlib.sha256(frame.data).hexdigest())
        frames.append((frame.t, float(gray[top:bottom].mean())))

    def _ahead(self, session: Session, t: float) -> str:
        first = session.state.get("first")
        remembered = [
            luma
            for run_id, digests, frames in self.memory
            if run_id != session.run_id and first in digests
            for at, luma in frames
            if at > t
        ]
        return "text ahead" if any(luma > _TEXT_LUMA for luma in remembered) else "nothing ahead"

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say(self._ahead(session, question.t))

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await respond.say(self._ahead(session, step.t))


class FlakyOptions(BaseModel):
    p: float = 0.02  # the chance that an output is replaced


class FlakyAdapter(ReferenceAdapter):
    """The reference adapter, but each of its outputs (an answer, a step's decision) is
    replaced by "not sure" with probability `p`: the worst case for the audit's rule, as
    two replaced outputs always agree."""

    name = "flaky"
    Config = FlakyOptions

    def __init__(self, options: FlakyOptions) -> None:
        self.p = options.p
        self.random = random.Random()  # its own generator, seeded from the OS

    async def on_question(self, session: Session, question: Question, respond: Responder):
        if self.random.random() < self.p:
            await respond.say("not sure")
        else:
            await super().on_question(session, question, respond)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        if self.random.random() < self.p:
            await respond.say("not sure")
        else:
            await super().on_step(session, step, respond)

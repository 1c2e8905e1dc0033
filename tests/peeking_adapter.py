"""Adapters of the causality audit's tests (tests/test_causality_audit.py), served as real
WebSocket services in their own processes (`python -m streameval.adapters
tests.peeking_adapter:Name --port 0`). None of this ships.

`PeekingAdapter` cheats the way the audit must catch: it is given the folder of the
benchmark it is evaluated on (`-A benchmark_dir=...`, as an adapter running on the
evaluation machine could find it), looks its session's record id up in the
benchmark.json there, opens that record's video file itself and, at every question and
step, says how bright the frame `lookahead_s` ahead is.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import av
import numpy as np
from pydantic import BaseModel

from streameval.adapters.sdk import Adapter, Responder, Session
from streameval.protocol import AdapterConditions, Question, Step

_POLLED = AdapterConditions(state="native", initiation="polled", model_name="test")


class PeekingOptions(BaseModel):
    benchmark_dir: str  # the folder holding the benchmark.json of the run
    lookahead_s: float = 10.0


class PeekingAdapter(Adapter):
    """Answers with the mean brightness of the frame `lookahead_s` ahead of the Core's."""

    name = "peeking"
    conditions = _POLLED
    Config = PeekingOptions

    def __init__(self, options: PeekingOptions) -> None:
        self.options = options
        index = json.loads((Path(options.benchmark_dir) / "benchmark.json").read_text())
        self.video_of = {r["record_id"]: r["video_path"] for r in index["records"]}

    async def on_session_start(self, session: Session) -> None:
        video = Path(self.options.benchmark_dir) / self.video_of[session.record_ids[0]]
        with av.open(str(video)) as container:
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

"""Baselines that need no model: they bound what a score means from below.

Their answers are one word, reported as one output token. They take a run's sound as they
take its frames, and ignore both: a baseline runs on a benchmark with sound tasks as it is.
"""

from __future__ import annotations

import random
import zlib

from streameval.adapters.sdk import Adapter, Responder, Session
from streameval.protocol import AdapterConditions, Question, Step


def _conditions(model: str) -> AdapterConditions:
    return AdapterConditions(
        state="non-native", initiation="polled", deployment="in-process", model_name=model
    )


class SilentAdapter(Adapter):
    """Never speaks: declines every question and stays silent at every step."""

    name = "silent"
    version = "1"
    conditions = _conditions("baseline-silent")
    consumes_audio = True

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.silent()


class AlwaysAdapter(Adapter):
    """Speaks at every step (a false-alarm upper bound) and always picks the first option."""

    name = "always"
    version = "1"
    conditions = _conditions("baseline-always")
    consumes_audio = True

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say(question.options[0].split(".", 1)[0] if question.options else "A", 1)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await respond.say("yes", 1)


class RandomChoiceAdapter(Adapter):
    """Picks an option uniformly at random, seeded by the record so reruns agree."""

    name = "random-choice"
    version = "1"
    conditions = _conditions("baseline-random-choice")
    consumes_audio = True

    async def on_question(self, session: Session, question: Question, respond: Responder):
        rng = random.Random(zlib.crc32(question.task_id.encode()))
        labels = [option.split(".", 1)[0].strip() for option in question.options] or ["A"]
        await respond.say(rng.choice(labels), 1)

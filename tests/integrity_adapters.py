"""Test adapters for run integrity (tests/test_run_integrity.py), served as real processes
(`python -m streameval.adapters tests.integrity_adapters:Name --port 0`). None of this ships.
"""

from __future__ import annotations

import json
import os

from streameval.adapters.sdk import Adapter, Responder, Session
from streameval.protocol import AdapterConditions, Instruction, Question, Step

# Set in the adapter's environment: the process dies at the question of this task.
CRASH_AT_ENV = "STREAMEVAL_TEST_CRASH_AT"


class FlakyAdapter(Adapter):
    """Answers "A", except: the proactive task gets a fatal adapter error (every time), and
    the process dies at the question named by $STREAMEVAL_TEST_CRASH_AT (when set), as an
    OOM kill would. Its identity is the same with or without the crash."""

    name = "flaky"
    version = "1"
    conditions = AdapterConditions(state="native", initiation="polled", model_name="flaky-model")

    async def on_question(self, session: Session, question: Question, respond: Responder):
        if question.task_id == os.environ.get(CRASH_AT_ENV):
            os._exit(3)
        await respond.say("A")

    async def on_instruction(self, session: Session, instruction: Instruction, respond):
        error = {"type": "error", "code": "broken", "message": "cannot monitor", "fatal": True}
        await session.send(json.dumps(error))

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await respond.silent(step.step)

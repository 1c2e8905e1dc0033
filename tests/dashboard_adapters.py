"""An adapter of the dashboard's browser tests (tests/test_dashboard_browser.py), served as a
real WebSocket service in its own process (`python -m streameval.adapters
tests.dashboard_adapters:FirstOptionReference --port 0`). None of this ships.

`FirstOptionReference` looks at every frame as the reference adapter does (so its run reports
a workload, and the quality chart plots it) but answers every question with its first option:
its QA accuracy is neither 0 nor 1, so its interval is a real one, not a single value.
"""

from __future__ import annotations

from streameval.adapters.reference import ReferenceAdapter
from streameval.adapters.sdk import Responder, Session
from streameval.protocol import Question


class FirstOptionReference(ReferenceAdapter):
    name = "first-option-reference"
    conditions = ReferenceAdapter.conditions.model_copy(update={"model_name": "first-option"})

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say(question.options[0].split(".", 1)[0] if question.options else "A", 1)

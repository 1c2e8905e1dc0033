"""What `streameval synth` asks the served model at each stage, and how it reads the reply.

The wording follows the paper's Appendix E (Tables 11-14) in spirit: every prompt quotes the
category's definition (synth/taxonomy.py) and ends with the exact form the reply must take,
so that each reply is parsed strictly:

- stage 1, classification: one category code (IV, MD, TA, AM or DED);
- stage 2, questions: a JSON list of exactly K distinct questions;
- stage 3, relevance: "yes" or "no" for one (segment, question) pair;
- stage 4, response: one short sentence answering the chosen question from the frames so
  far (anything but an empty reply or a silence token: Silent, WAIT, <silent>, as the
  stage 5 audit reads them).

A reply that does not parse raises `ReplyError`; the client retries with `retry_prompt`,
which repeats the request with the reason, since at temperature 0 the same prompt would
give the same reply again.
"""

from __future__ import annotations

import json

from streameval.synth.filters import is_silence_token
from streameval.synth.models import Category
from streameval.synth.taxonomy import CATEGORIES

# Whitespace, quotes, markdown emphasis and a closing full stop around a one-word reply.
_DECORATION = " \t\r\n\"'`*."

CLASSIFY_FORMAT = "Reply with the category code only (one of IV, MD, TA, AM, DED) and nothing else."
QUESTIONS_FORMAT = (
    "Reply with a JSON list of exactly {k} strings, the questions, and nothing else, "
    'e.g. ["first question?", "second question?"].'
)
RELEVANCE_FORMAT = "Reply with yes or no only."
RESPONSE_FORMAT = "Reply with your response to the viewer in one short sentence."

CLASSIFY_PROMPT = (
    "The images above are {count} frames spread evenly over a video of {duration:g} seconds, "
    "in time order.\n"
    "Task: choose the streaming task category that suits this video best. A streaming "
    "assistant watches the video live; each category is a way it must behave:\n"
    "{categories}\n" + CLASSIFY_FORMAT
)
QUESTIONS_PROMPT = (
    "The images above are {count} frames spread evenly over a video of {duration:g} seconds, "
    "in time order.\n"
    "Task: write {k} questions that a viewer could ask a streaming assistant while watching "
    "this video live. They must be of the category {category}: {behaviour}\n"
    "Objective: {objective}, so that the assistant learns to {elicited}.\n"
    "Each question must be answerable from what the video shows, without outside knowledge, "
    "and the questions must differ from each other.\n" + QUESTIONS_FORMAT
)
RELEVANCE_PROMPT = (
    "The images above are the frames of one short segment of a video, from {start:g}s to "
    "{end:g}s.\n"
    "A viewer watching the video live asked a question of the category {category}: "
    "{behaviour}\n"
    "Question: {question}\n"
    "Task: does this segment show the visual evidence needed to answer the question now "
    "(for a question that waits for an event, the event or its cue)?\n" + RELEVANCE_FORMAT
)
RESPONSE_PROMPT = (
    "The images above are frames of a live video stream in time order, from its start up to "
    "now, {t:g} seconds into the video. Use only what these frames show.\n"
    "The viewer asked a question of the category {category}: {behaviour}\n"
    "Question: {question}\n"
    "The visual evidence for it is on screen now: respond to the viewer.\n" + RESPONSE_FORMAT
)
RETRY_NOTE = "\nYour previous reply could not be used ({error}). {format}"


class ReplyError(ValueError):
    """A reply that is not in the form its prompt asked for; the message says why."""


def _category_line(code: Category) -> str:
    category = CATEGORIES[code]
    return f"{category.code} ({category.name}): {category.behaviour}"


def _named(code: Category) -> str:
    return f"{code} ({CATEGORIES[code].name})"


def classify_prompt(count: int, duration_s: float) -> str:
    lines = "\n".join(f"- {_category_line(code)}" for code in CATEGORIES)
    return CLASSIFY_PROMPT.format(count=count, duration=duration_s, categories=lines)


def questions_prompt(category: Category, k: int, count: int, duration_s: float) -> str:
    chosen = CATEGORIES[category]
    return QUESTIONS_PROMPT.format(
        count=count,
        duration=duration_s,
        k=k,
        category=_named(category),
        behaviour=chosen.behaviour,
        objective=chosen.objective,
        elicited=chosen.elicited[0].lower() + chosen.elicited[1:],
    )


def relevance_prompt(category: Category, question: str, start_s: float, end_s: float) -> str:
    return RELEVANCE_PROMPT.format(
        start=start_s,
        end=end_s,
        category=_named(category),
        behaviour=CATEGORIES[category].behaviour,
        question=question,
    )


def response_prompt(category: Category, question: str, t_s: float) -> str:
    return RESPONSE_PROMPT.format(
        t=t_s,
        category=_named(category),
        behaviour=CATEGORIES[category].behaviour,
        question=question,
    )


def retry_prompt(prompt: str, error: ReplyError, reply_format: str) -> str:
    return prompt + RETRY_NOTE.format(error=error, format=reply_format)


# --------------------------------------------------------------------------- replies


def _word(reply: str) -> str:
    return reply.strip(_DECORATION)


def _quoted(reply: str) -> str:
    shown = reply if len(reply) <= 60 else reply[:57] + "..."
    return json.dumps(shown)


def parse_category(reply: str) -> Category:
    code = _word(reply).upper()
    for known in CATEGORIES:
        if code == known:
            return known
    raise ReplyError(f"expected one of IV, MD, TA, AM, DED, got {_quoted(reply)}")


def parse_questions(reply: str, k: int) -> tuple[str, ...]:
    """Exactly `k` distinct, non-empty questions; a markdown code fence around the JSON is
    tolerated (chat models add one unasked)."""
    text = reply.strip()
    if text.startswith("```"):
        text = text.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        questions = json.loads(text)
    except json.JSONDecodeError:
        raise ReplyError(f"expected a JSON list of {k} strings, got {_quoted(reply)}") from None
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        raise ReplyError(f"expected a JSON list of {k} strings, got {_quoted(reply)}")
    cleaned = tuple(q.strip() for q in questions)
    if len(cleaned) != k:
        raise ReplyError(f"expected {k} questions, got {len(cleaned)}")
    if not all(cleaned):
        raise ReplyError("a question is empty")
    if len({q.casefold() for q in cleaned}) != k:
        raise ReplyError("two questions are the same")
    return cleaned


def parse_relevance(reply: str) -> bool:
    word = _word(reply).lower()
    if word in ("yes", "no"):
        return word == "yes"
    raise ReplyError(f"expected yes or no, got {_quoted(reply)}")


def parse_response(reply: str) -> str:
    text = reply.strip()
    if not text:
        raise ReplyError("the response is empty")
    if is_silence_token(text):
        raise ReplyError(f"expected a response to the question, got {_quoted(text)}")
    return text

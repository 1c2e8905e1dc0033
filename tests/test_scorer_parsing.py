"""Normalisation, the strict and recoverable option parsers, and the silence test."""

from __future__ import annotations

import pytest

from scorer.parsing import (
    gold_label,
    is_answer,
    normalise,
    option_labels,
    parse_recoverable,
    parse_strict,
)

LABELS = ("A", "B", "C", "D")
SILENCE = ("wait", "silent", "<silent>")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  The   Answer\n is  B ", "the answer is b"),
        ("<think>A? no, maybe C</think>B", "b"),
        ("<THINK>long\nreasoning</THINK>\n\nC.", "c."),
        ("<think>never closed, so no answer follows", ""),
        ("B\nuser\nWhat about A?", "b"),
        ("B\nAssistant:\nC", "b"),
        ("assistant\nB", "b"),
        (": B", "b"),
        (":  candy  bar", "candy bar"),
        ("user", ""),
        ("Tell the user: B", "tell the user: b"),
    ],
)
def test_normalise(raw: str, expected: str) -> None:
    assert normalise(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("B", "B"),
        ("b", "B"),
        ("B.", "B"),
        ("(B)", "B"),
        ("[b]", "B"),
        ("  (c)  ", "C"),
        ("<think>A</think> D", "D"),
        (": a", "A"),
        ("E", None),  # not an option label
        ("B)", None),
        ("Answer: B", None),
        ("B. candy", None),
        ("BB", None),
        ("", None),
        ("yes", None),
    ],
)
def test_strict_accepts_only_bare_labels(raw: str, expected: str | None) -> None:
    assert parse_strict(raw, LABELS) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # bare labels (everything strict accepts)
        ("B", "B"),
        ("(d)", "D"),
        # introduced
        ("Answer: B", "B"),
        ("answer: b", "B"),
        ("The answer is B", "B"),
        ("The answer is B because the cup is red.", "B"),
        ("The correct answer is: (D).", "D"),
        ("Final answer: C", "C"),
        ("Best option - A", "A"),
        ("Option C", "C"),
        ("the answer is (a)", "A"),
        ("The answer is b.", "B"),
        # followed by option text
        ("B. candy", "B"),
        ("B) candy", "B"),
        ("(B) candy", "B"),
        ("[C] the red one", "C"),
        ("B: candy", "B"),
        ("answer: b. candy", "B"),
        ("B. A good choice", "B"),  # "A" followed by a lower-case word is an article
        ("B. I like it", "B"),  # and "I" a pronoun
        # two distinct labels
        ("B or C", None),
        ("The answer is B. Option A is wrong.", None),
        ("B. (C) is also possible", None),
        ("A. B", None),
        # unlabeled prose and ordinary words
        ("The answer is a cat", None),
        ("A cat is on the table", None),
        ("I think B", None),
        ("yes", None),
        ("candy", None),
        ("B candy", None),
        # a label that is not an option
        ("The answer is E", None),
        ("E. five", None),
        # silence is no answer
        ("", None),
    ],
)
def test_recoverable(raw: str, expected: str | None) -> None:
    assert parse_recoverable(raw, LABELS) == expected


def test_recoverable_only_knows_the_record_labels() -> None:
    assert parse_recoverable("Answer: C", ("A", "B")) is None
    assert parse_recoverable("Answer: C", ("A", "B", "C")) == "C"


def test_option_labels_and_gold() -> None:
    assert option_labels(["A. red", "B. blue", "(C) green", "D) pink"]) == LABELS
    # Unlabeled options are labeled by position.
    assert option_labels(["red", "blue"]) == ("A", "B")
    assert gold_label("b") == "B"
    assert gold_label("C. green") == "C"


@pytest.mark.parametrize(
    ("raw", "answered"),
    [
        ("3", True),
        ("the cup is red", True),
        ("wait", False),
        ("Silent.", False),
        ("<silent>", False),
        ("  WAIT!  ", False),
        ("", False),
        ("<think>nothing yet</think>", False),
        ("...", False),
        ("waiting", True),
    ],
)
def test_silence_tokens_are_not_answers(raw: str, answered: bool) -> None:
    assert is_answer(raw, SILENCE) is answered

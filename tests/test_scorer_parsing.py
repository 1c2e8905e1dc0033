"""Normalisation (TRACE's and extended), the option parsers, and the silence test."""

from __future__ import annotations

import pytest

from streameval.scorer.parsing import (
    OPTION_PARSERS,
    gold_label,
    is_answer,
    normalise,
    normalise_extended,
    option_labels,
    parse_extended,
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
        # TRACE drops only the tag of an unclosed think block, and stray closing tags.
        ("<think>never closed, so B", "never closed, so b"),
        ("reasoning</think> C", "reasoning c"),
        ("B\nuser\nWhat about A?", "b"),
        ("B\nAssistant:\nC", "b"),
        ("B\n  system  \nC", "b"),
        ("B\n\nuser", "b"),
        # A role line is cut only when a newline precedes it.
        ("assistant\nB", "assistant b"),
        ("user", "user"),
        ("B\nuser: C", "b user: c"),
        (": B", "b"),
        ("  :  candy  bar", "candy bar"),
        ("::B", ":b"),
        ("Tell the user: B", "tell the user: b"),
        ("", ""),
    ],
)
def test_normalise_is_trace(raw: str, expected: str) -> None:
    assert normalise(raw) == expected


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
def test_normalise_extended(raw: str, expected: str) -> None:
    assert normalise_extended(raw) == expected


# TRACE's golden cases: (answer text, strict, paper), labels A-D.
GOLDEN = [
    ("B", "B", "B"),
    ("b", "B", "B"),
    ("B.", "B", "B"),
    ("(B)", "B", "B"),
    ("[B]", "B", "B"),
    ("B)", "B", "B"),
    ("b)", "B", "B"),
    ("(B).", "B", "B"),
    ("[B].", "B", "B"),
    ("(B", "B", "B"),
    ("B]", "B", "B"),
    ("[B)", "B", "B"),
    (" B ", "B", "B"),
    ("B. The cat", None, "B"),
    ("B: because", None, None),
    ("Final answer: [D]", None, None),
    ("The correct answer is (A).", None, None),
    ("A person walks", None, "A"),
    ("A cat is on the mat", None, "A"),
    ("Answer - C", None, None),
    ("answer: (c)", None, None),
    ("Option (B)", None, None),
    ("B is correct", None, "B"),
    ("A. B is wrong", None, "A"),
    ("Answer: B because C is wrong", None, "B"),
    ("the answer is a cat", None, "A"),
    ("assistant\nB", None, None),
    ("The answer is B", None, "B"),
    ("Answer: B", None, "B"),
    ("I think it's C.", None, None),
    ("C) red", None, "C"),
    ("(C) red ball", None, "C"),
    ("Both A and B", None, None),
    ("A or B", None, None),
    ("None of the above", None, None),
    ("E", None, None),
    ("<think>hmm A</think> B", "B", "B"),
    ("**B**", None, None),
    ("B\n\nExplanation: ...", None, "B"),
    ("answer is: D", None, None),
    ("The answer is: (D) blue", None, None),
    ("Option C is correct.", None, "C"),
    ("D - green", None, "D"),
    ("I choose B.", None, None),
    ("It is B.", None, None),
    ("X", None, None),
    ("", None, None),
    ("wait", None, None),
    ("  c  ", "C", "C"),
    ("B, because", None, None),
]

# Our own cases, with the values TRACE's rules give.
RULES = [
    # pairs mention both labels
    ("B / C", None, None),
    ("B/C", None, None),
    ("B; C", None, None),
    ("B, C", None, None),
    ("the answer is B or C", None, None),
    ("option b and c", None, None),
    ("A, B, or C", None, None),
    # an alternative outside the labels takes the introduced label's win away...
    ("The answer is B or E", None, None),
    ("answer: b and e", None, None),
    # ...but not a leading label's
    ("B or E", None, "B"),
    # introducers: at most one of is / : / chosen, then the bare letter
    ("answer chosen B", None, "B"),
    ("Answer chosen: B", None, None),
    ("answer:b", None, "B"),
    ("Choice: D", None, "D"),
    ("answers b", None, None),  # "answers" is no introducer
    ("Answer: B. Option B is right.", None, "B"),  # the same label twice
    ("B. Option C is wrong", None, None),
    ("Option C, not D", None, "C"),  # a bare later letter is no mention
    # role lines and think tags
    ("B\nuser\nC", "B", "B"),
    ("B\n Assistant: \nA or C", "B", "B"),
    ("reasoning</think>\nC", None, None),
    ("</think>C", "C", "C"),
    ("<think>A", "A", "A"),  # an unclosed think keeps its text
    (": (B)", "B", "B"),
    # leading label forms
    ("[B] red", None, "B"),
    ("B] red", None, "B"),
    ("(B). red", None, None),  # one closing character only before the space
    ("B.C", None, None),
    ("BB", None, None),
    ("B))", "B", "B"),
    # labels outside the record's
    ("Answer: E", None, None),
    ("E. five", None, None),
    ("E) B", None, None),
    ("B. E. is wrong", None, "B"),
]


@pytest.mark.parametrize(("raw", "strict", "paper"), GOLDEN + RULES)
def test_trace_parsers(raw: str, strict: str | None, paper: str | None) -> None:
    assert parse_strict(raw, LABELS) == strict
    assert parse_recoverable(raw, LABELS) == paper


def test_trace_parsers_only_know_the_record_labels() -> None:
    assert parse_strict("C", ("A", "B")) is None
    assert parse_recoverable("Answer: C", ("A", "B")) is None
    assert parse_recoverable("Answer: C", ("A", "B", "C")) == "C"
    # C is not a label, so "B or C" mentions only B and the leading B wins.
    assert parse_recoverable("B or C", ("A", "B")) == "B"


def test_option_parsers_by_profile_name() -> None:
    expected = {
        "strict": parse_strict,
        "recoverable": parse_recoverable,
        "extended": parse_extended,
    }
    assert expected == OPTION_PARSERS


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # bare labels
        ("B", "B"),
        ("(d)", "D"),
        ("  (c)  ", "C"),
        ("<think>A</think> D", "D"),
        (": a", "A"),
        ("BB", None),
        ("yes", None),
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
        ("E", None),
        # silence, and an unclosed think, are no answer
        ("", None),
        ("<think>A", None),
    ],
)
def test_extended(raw: str, expected: str | None) -> None:
    assert parse_extended(raw, LABELS) == expected


def test_extended_only_knows_the_record_labels() -> None:
    assert parse_extended("Answer: C", ("A", "B")) is None
    assert parse_extended("Answer: C", ("A", "B", "C")) == "C"


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
        ("  WAIT  ", False),
        ("", False),
        ("<think>nothing yet</think>", False),
        # TRACE compares exactly: everything else is an answer.
        ("Silent.", True),
        ("<silent>", True),
        ("wait.", True),
        ("...", True),
        ("waiting", True),
    ],
)
def test_is_answer_trace(raw: str, answered: bool) -> None:
    assert is_answer(raw, ("wait",)) is answered


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
        ("<think>unclosed", False),
        ("...", False),
        ("waiting", True),
    ],
)
def test_is_answer_ignoring_trailing_punctuation(raw: str, answered: bool) -> None:
    assert is_answer(raw, SILENCE, ignore_trailing_punctuation=True) is answered

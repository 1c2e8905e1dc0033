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
from streameval.scorer.profiles import SCORING_PROFILES

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
        ("B\n  system  \nC", "b"),
        ("B\n\n USER \n\nC", "b"),
        # A role line is cut only when the word stands alone between two newlines.
        ("B\nAssistant:\nC", "b assistant: c"),
        ("B\n\nuser", "b user"),
        ("assistant\nB", "assistant b"),
        ("user", "user"),
        ("B\nuser: C", "b user: c"),
        ("B\nusers\nC", "b users c"),
        # One leading colon, ASCII or full-width, goes with the whitespace around it.
        (": B", "b"),
        ("  :  candy  bar", "candy bar"),
        ("\uff1a B", "b"),
        ("::B", ":b"),
        # Stray tags are dropped as written, without a space; other spellings are text.
        ("A</think>B", "ab"),
        ("<THINK>B", "<think>b"),
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
    ("B\n Assistant \nA or C", "B", "B"),
    ("B\n Assistant: \nA or C", None, None),  # no role line: "a or c" is read too
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


# The five rules where this project once read TRACE otherwise (issue 31), one case each:
# (text, TRACE's normalisation, strict, paper, answered) and this project's extended reading
# of the same text (extended normalisation, extended parse, answered), which differs.
TRACE_RULES = {
    "role word alone on its line": (
        ("A\nassistant", "a assistant", None, "A", True),
        ("a", "A", True),
    ),
    "full-width colon": (("\uff1a B", "b", "B", "B", True), ("\uff1a b", None, True)),
    "think block with the whitespace after it": (
        ("<think>a</think>\nassistant\nX", "assistant x", None, None, True),
        ("x", None, True),
    ),
    "first introducer only": (
        (
            "B: option x is wrong, the answer is b",
            "b: option x is wrong, the answer is b",
            None,
            None,
            True,
        ),
        ("b: option x is wrong, the answer is b", "B", True),
    ),
    "or/and anywhere after the introduced label": (
        (
            "Answer: B, which is red and a ball",
            "answer: b, which is red and a ball",
            None,
            None,
            True,
        ),
        ("answer: b, which is red and a ball", "B", True),
    ),
}


@pytest.mark.parametrize("profile_name", ["trace-paper-v1", "trace-strict"])
@pytest.mark.parametrize("rule", list(TRACE_RULES))
def test_traces_five_rules_hold_under_both_trace_profiles(profile_name: str, rule: str) -> None:
    (raw, normalised, strict, paper, answered), _extended = TRACE_RULES[rule]
    profile = SCORING_PROFILES[profile_name]
    parse = OPTION_PARSERS[profile.option_parser]
    assert profile.normalise(raw) == normalised
    assert parse(raw, LABELS) == (strict if profile.option_parser == "strict" else paper)
    assert profile.is_answer(raw) is answered


@pytest.mark.parametrize("rule", list(TRACE_RULES))
def test_trace_extended_reads_the_five_rules_its_own_way(rule: str) -> None:
    (raw, normalised, _strict, paper, answered), expected = TRACE_RULES[rule]
    profile = SCORING_PROFILES["trace-extended"]
    got = (profile.normalise(raw), OPTION_PARSERS[profile.option_parser](raw, LABELS))
    assert (*got, profile.is_answer(raw)) == expected
    assert (*got, profile.is_answer(raw)) != (normalised, paper, answered)


@pytest.mark.parametrize(
    ("raw", "answered"),
    [
        ("\nassistant", True),  # no newline after the role word: "assistant" is an answer
        ("<think>a</think>\n\nassistant\nwait", True),  # "assistant wait"
        ("\uff1a wait", False),
        ("B\nassistant\nwait", True),
        ("wait\nassistant\nB", False),
    ],
)
def test_traces_normalisation_decides_what_is_an_answer(raw: str, answered: bool) -> None:
    """The consequences for proactive scores: answered episodes and false alarms."""
    for name in ("trace-paper-v1", "trace-strict"):
        assert SCORING_PROFILES[name].is_answer(raw) is answered


@pytest.mark.parametrize(
    ("raw", "paper"),
    [
        # A voided introduced label falls through to the strict and the leading parse.
        ("B. Answer: B and X", "B"),
        ("Answer: B or x", None),
        # The first introducer names no label: later ones are not looked at...
        ("option x is wrong, the answer is b", None),
        # ...but a first valid one wins over later ones.
        ("the answer is b, option x is wrong", "B"),
        ("answer isb", "B"),
    ],
)
def test_traces_recoverable_parse_edges(raw: str, paper: str | None) -> None:
    assert parse_recoverable(raw, LABELS) == paper


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

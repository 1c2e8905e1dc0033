"""Text normalisation, multiple-choice option parsers and the silence test.

`normalise`, `parse_strict`, `parse_recoverable` and `is_answer` (by default) are TRACE's
public scorer (github.com/om-ai-lab/trace-bench, src/trace_bench/scoring.py: `normalize_text`,
`extract_choice`, `extract_recoverable_choice`), rule for rule:

- Normalisation, in this order: delete every `<think>...</think>` block (tags matched
  case-insensitively) together with the whitespace after it; delete the stray tags `<think>`
  and `</think>` written exactly so (nothing takes their place); cut the text at its first
  role line: a newline, optional whitespace, `user`/`assistant`/`system` (any case), optional
  whitespace, a newline (so `A\nassistant` and `B\nassistant:\nC` are not cut); delete one
  leading `:` or full-width `：` with the whitespace around it; strip, lowercase, collapse
  whitespace.
- The parsers read the normalised text upper-cased, and only the record's labels count.
- Strict parse: the whole text is one label, optionally opened by `(` or `[`, optionally
  closed by `)` or `]`, optionally followed by one `.` or `)`.
- Recoverable (paper) parse:
  1. mentioned labels: a letter not preceded by a word character and followed by `.`, `)`
     or `:`; the letter after every `answer`/`option`/`choice` (a whole word, then optionally
     one of `is`, `:`, `chosen`); both letters of each `X / Y`, `X, Y`, `X; Y`, `X or Y`,
     `X and Y` (found left to right without overlap). More than one mentioned label: invalid;
  2. the FIRST answer/option/choice match wins when its letter is a label and no `or <letter>`
     / `and <letter>` occurs anywhere after it; otherwise (later matches are not looked at)
  3. the strict parse; else
  4. a label at the very start, optionally bracketed or followed by `.`, `)` or `]`, then
     whitespace ("B. candy", "(C) red", "A person walks").
  Otherwise invalid.
- Silence: an answer is a text whose normalisation is not empty and not a silence token.

`normalise_extended`, `parse_extended` and `is_answer(..., ignore_trailing_punctuation=True)`
are this project's own reading (the `trace-extended` profile), documented in docs/metrics.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# --- TRACE -------------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<think>.*?</think>\s*", re.S | re.I)
_STRAY_TAGS = ("<think>", "</think>")  # TRACE drops these spellings only
_ROLE_LINE = re.compile(r"\n\s*(?:user|assistant|system)\s*\n", re.I)
_LEADING_COLON = re.compile(r"\s*[:\uff1a]\s*")

_TRACE_STRICT = re.compile(r"\s*[(\[]?([A-Z])[)\]]?[.)]?\s*")
_MARKED = re.compile(r"(?<!\w)([A-Z])[.):]")
_INTRODUCED = re.compile(r"\b(?:ANSWER|OPTION|CHOICE)\b\s*(?:IS|:|CHOSEN)?\s*([A-Z])\b")
_PAIR = re.compile(r"\b([A-Z])\s*(?:[/,;]|\bOR\b|\bAND\b)\s*([A-Z])\b")
# Anywhere after the introduced label, any letter: "answer: b, red and a ball" is voided.
_ALTERNATIVE = re.compile(r"\b(?:OR|AND)\s+[A-Z]\b")
_LEADING = re.compile(r"\s*[(\[]?([A-Z])[.)\]]?\s+")


def normalise(text: str) -> str:
    """TRACE's normalisation, used for the silence test and exact matching."""
    text = _THINK_BLOCK.sub("", text)
    for tag in _STRAY_TAGS:
        text = text.replace(tag, "")
    role = _ROLE_LINE.search(text)
    if role is not None:
        text = text[: role.start()]
    colon = _LEADING_COLON.match(text)
    if colon is not None:
        text = text[colon.end() :]
    return " ".join(text.strip().lower().split())


def parse_strict(text: str, labels: Sequence[str]) -> str | None:
    """TRACE's strict parse: the whole normalised text is one (bracketed) label."""
    match = _TRACE_STRICT.fullmatch(normalise(text).upper())
    return _label(match, labels)


def parse_recoverable(text: str, labels: Sequence[str]) -> str | None:
    """TRACE's paper parse: one unambiguous label, introduced, bare or leading."""
    upper = normalise(text).upper()
    if len(_mentioned(upper, labels)) > 1:
        return None
    first = _INTRODUCED.search(upper)
    introduced = _label(first, labels)
    if introduced is not None and not _ALTERNATIVE.search(upper[first.end() :]):
        return introduced
    strict = parse_strict(text, labels)
    if strict is not None:
        return strict
    return _label(_LEADING.match(upper), labels)


def _label(match: re.Match[str] | None, labels: Sequence[str]) -> str | None:
    return match.group(1) if match is not None and match.group(1) in labels else None


def _mentioned(text: str, labels: Sequence[str]) -> set[str]:
    letters = [match.group(1) for match in _MARKED.finditer(text)]
    letters += [match.group(1) for match in _INTRODUCED.finditer(text)]
    for match in _PAIR.finditer(text):
        letters += match.groups()
    return {letter for letter in letters if letter in labels}


# --- this project's extended reading -----------------------------------------------------

# An unclosed <think> block swallows the rest: the model never got to its answer.
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_ROLE_LINE_EXTENDED = re.compile(r"\s*(?:user|assistant|system)\s*:?\s*", re.I)
_SPACE = re.compile(r"\s+")

_STRICT = re.compile(r"\(([a-z])\)|\[([a-z])\]|([a-z])\.?")
_OPTION_LABEL = re.compile(r"\s*[(\[]?([A-Za-z])\s*[)\].:]")
# Label first, with an explicit separator, then (optionally) anything: "B. candy", "(B) x".
_EXT_LEADING = re.compile(
    r"(?:\((?P<p>[A-Za-z])\)|\[(?P<s>[A-Za-z])\])[.:]?(?:\s+.*)?"
    r"|(?P<b>[A-Za-z])[.:)](?:\s+.*)?"
)
_INTRO = re.compile(
    r"(?:the\s+)?(?:(?:correct|final|best|right)\s+)?(?:answer|option|choice)"
    r"(?:\s+(?:is|would\s+be|should\s+be))?\s*[:\-]?\s*"
    r"(?:\((?P<p>[A-Za-z])\)|\[(?P<s>[A-Za-z])\]|(?P<b>[A-Za-z]))(?P<after>(?![A-Za-z0-9']).*)",
    re.I,
)
# Other label mentions that make an answer ambiguous: "option x", bracketed letters, or
# standalone capitals. "A" and "I" followed by a lowercase word are an article and a pronoun.
_MENTION = re.compile(
    r"(?:answer|option|choice)\s+[(\[]?([A-Za-z])(?![A-Za-z0-9'])"
    r"|[(\[]([A-Za-z])[)\]]"
    r"|(?<![A-Za-z0-9'])([A-Z])(?![A-Za-z0-9'])",
    re.I,
)
_WORD_AFTER = re.compile(r"\s+[a-z]")


def clean(text: str) -> str:
    """This project's normalisation without lowercasing (the extended parser needs the case)."""
    text = _THINK.sub(" ", text)
    kept: list[str] = []
    for line in text.splitlines():
        if _ROLE_LINE_EXTENDED.fullmatch(line):
            if any(part.strip() for part in kept):
                break  # the model started a new chat turn: the answer ended before it
            continue  # a leaked role header before the answer
        kept.append(line)
    joined = _SPACE.sub(" ", " ".join(kept)).strip()
    if joined.startswith(":"):
        joined = joined[1:].lstrip()
    return joined


def normalise_extended(text: str) -> str:
    """This project's normalisation (the `trace-extended` profile)."""
    return clean(text).lower()


def option_labels(options: Sequence[str]) -> tuple[str, ...]:
    """Upper-case labels of the options: "A. red" -> "A"; unlabeled options by position."""
    labels = []
    for position, option in enumerate(options):
        match = _OPTION_LABEL.match(option)
        labels.append(match.group(1).upper() if match else chr(ord("A") + position))
    return tuple(labels)


def gold_label(answer: str) -> str:
    """The record's answer as a label: "B", "b" and "B. candy" all give "B"."""
    stripped = answer.strip()
    match = _OPTION_LABEL.match(stripped)
    return match.group(1).upper() if match else stripped.upper()


def parse_extended(text: str, labels: Sequence[str]) -> str | None:
    """This project's reading: a bare label, or one label introduced or followed by text."""
    bare = _bare_extended(text, labels)
    if bare is not None:
        return bare
    cleaned = clean(text)
    found = _leading_label(cleaned) or _introduced_label(cleaned)
    if found is None:
        return None
    label, end = found
    if label not in labels:
        return None
    mentioned = _mentions(cleaned[end:], labels)
    return label if mentioned <= {label} else None


def _bare_extended(text: str, labels: Sequence[str]) -> str | None:
    """The extended normalisation is exactly `b`, `b.`, `(b)` or `[b]`."""
    match = _STRICT.fullmatch(normalise_extended(text))
    if match is None:
        return None
    label = next(group for group in match.groups() if group).upper()
    return label if label in labels else None


def _leading_label(text: str) -> tuple[str, int] | None:
    match = _EXT_LEADING.fullmatch(text)
    if match is None:
        return None
    group = next(name for name in ("p", "s", "b") if match.group(name))
    return match.group(group).upper(), match.end(group) + 1


def _introduced_label(text: str) -> tuple[str, int] | None:
    match = _INTRO.fullmatch(text)
    if match is None:
        return None
    after = match.group("after")
    bare = match.group("b")
    # "the answer is a cat": a lower-case bare letter followed by words is an ordinary word.
    if bare is not None and bare.islower() and after.strip() and after.lstrip()[0] not in ".,;:!)":
        return None
    group = next(name for name in ("p", "s", "b") if match.group(name))
    return match.group(group).upper(), match.start("after")


def _mentions(rest: str, labels: Sequence[str]) -> set[str]:
    found = set()
    for match in _MENTION.finditer(rest):
        named, bracketed, capital = match.groups()
        if capital is not None:
            # re.I makes the capital branch match lower case too: keep real capitals only.
            if capital.islower():
                continue
            if capital in "AI" and _WORD_AFTER.match(rest, match.end()):
                continue
        label = (named or bracketed or capital).upper()
        if label in labels:
            found.add(label)
    return found


OptionParser = Callable[[str, Sequence[str]], "str | None"]
OPTION_PARSERS: dict[str, OptionParser] = {
    "strict": parse_strict,
    "recoverable": parse_recoverable,
    "extended": parse_extended,
}


def is_answer(
    text: str, silence_tokens: Sequence[str], ignore_trailing_punctuation: bool = False
) -> bool:
    """An answered episode: normalised text not empty and not a silence token.

    TRACE compares the normalised text exactly ("Silent." is an answer). With
    `ignore_trailing_punctuation` (the extended profile) the extended normalisation is used
    and trailing `.`/`!` are ignored, so "Silent." is silence.
    """
    if ignore_trailing_punctuation:
        core = normalise_extended(text).rstrip(".! ")
    else:
        core = normalise(text)
    return bool(core) and core not in silence_tokens

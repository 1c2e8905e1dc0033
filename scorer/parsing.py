"""Text normalisation, multiple-choice option parsers and the silence test.

`normalise`, `parse_strict`, `parse_recoverable` and `is_answer` (by default) follow TRACE's
public scorer:

- Normalisation: drop `<think>...</think>` blocks, then stray `<think>`/`</think>` tags (tags
  matched case-insensitively, each replaced by a space); cut the text at the first line that
  is only `user`, `assistant` or `system` and is preceded by a newline (a text that *starts*
  with `assistant\\n` is not cut); strip, drop one leading `:`; lowercase; collapse whitespace.
  Our reading of "a line that is only a role": the role word is matched case-insensitively,
  may be surrounded by spaces or tabs and may end with one `:` ("Assistant:"); the line ends
  at a newline or at the end of the text.
- Strict parse: the whole normalised text is one label, optionally opened by `(` or `[`,
  optionally closed by `)` or `]`, optionally followed by one `.` or `)`.
- Paper (recoverable) parse, on the normalised text:
  1. mentioned labels: a standalone label followed by `.`, `)` or `:`; a label after
     `answer`/`option`/`choice` (optionally followed by exactly one of `is`, `:`, `chosen`)
     as a bare letter; both labels of `X / Y`, `X, Y`, `X; Y`, `X or Y`, `X and Y`. More
     than one distinct mentioned label is invalid;
  2. else the first answer/option/choice label wins, unless `or X`/`and X` follows it;
  3. else the strict parse;
  4. else a label at the very start followed by whitespace, optionally bracketed or
     followed by `.`, `)` or `]` ("B. candy", "(C) red", "A person walks").
  Otherwise invalid. Only the record's labels count anywhere.
- Silence: an answer is a text whose normalisation is not empty and not a silence token.

`normalise_extended`, `parse_extended` and `is_answer(..., ignore_trailing_punctuation=True)`
are this project's own reading (the `trace-extended` profile), documented in docs/metrics.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# --- TRACE -------------------------------------------------------------------------------

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.S | re.I)
_THINK_TAG = re.compile(r"</?think>", re.I)
# Only a role line after a newline ends the answer: a leading "assistant\n" is kept.
_ROLE_CUT = re.compile(r"\n[^\S\n]*(?:user|assistant|system)[^\S\n]*:?[^\S\n]*(?=\n|\Z)", re.I)
_SPACE = re.compile(r"\s+")

_TRACE_STRICT = re.compile(r"[(\[]?([a-z])[)\]]?[.)]?")
# Overlapping (lookahead) so that every adjacent pair of "a, b, c" is seen.
_PAIR = re.compile(r"\b(?=([a-z])\s*(?:[/,;]|\s(?:or|and)\s)\s*([a-z])\b)")
_MARKED = re.compile(r"\b([a-z])[.):]")
# `\b` before the letter: "answers" is not "answer s", "answer is" is not "answer i".
_INTRODUCED = re.compile(r"\b(?:answer|option|choice)(?:\s+is|\s+chosen|\s*:)?\s*\b([a-z])\b")
# "the answer is b or e": an alternative after the introduced label takes its win away.
_ALTERNATIVE = re.compile(r"\s+(?:or|and)\s+[a-z]\b")
_LEADING = re.compile(r"[(\[]?([a-z])[.)\]]?\s")


def normalise(text: str) -> str:
    """TRACE's normalisation, used for exact matching."""
    text = _THINK_TAG.sub(" ", _THINK_BLOCK.sub(" ", text))
    role = _ROLE_CUT.search(text)
    if role is not None:
        text = text[: role.start()]
    text = text.strip()
    if text.startswith(":"):
        text = text[1:]
    return _SPACE.sub(" ", text.lower()).strip()


def parse_strict(text: str, labels: Sequence[str]) -> str | None:
    """TRACE's strict parse: the whole normalised text is one (bracketed) label."""
    match = _TRACE_STRICT.fullmatch(normalise(text))
    return _known(match.group(1), labels) if match else None


def parse_recoverable(text: str, labels: Sequence[str]) -> str | None:
    """TRACE's paper parse: one unambiguous label, introduced, bare or leading."""
    normalised = normalise(text)
    if len(_mentioned(normalised, labels)) > 1:
        return None
    introduced = _introduced(normalised, labels)
    if introduced is not None:
        return introduced
    strict = parse_strict(text, labels)
    if strict is not None:
        return strict
    leading = _LEADING.match(normalised)
    return _known(leading.group(1), labels) if leading else None


def _known(letter: str, labels: Sequence[str]) -> str | None:
    label = letter.upper()
    return label if label in labels else None


def _mentioned(text: str, labels: Sequence[str]) -> set[str]:
    letters = [match.group(1) for match in _MARKED.finditer(text)]
    letters += [match.group(1) for match in _INTRODUCED.finditer(text)]
    for match in _PAIR.finditer(text):
        letters += match.groups()
    return {label for letter in letters if (label := _known(letter, labels))}


def _introduced(text: str, labels: Sequence[str]) -> str | None:
    for match in _INTRODUCED.finditer(text):
        label = _known(match.group(1), labels)
        if label is not None:
            return None if _ALTERNATIVE.match(text, match.end()) else label
    return None


# --- this project's extended reading -----------------------------------------------------

# An unclosed <think> block swallows the rest: the model never got to its answer.
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_ROLE_LINE = re.compile(r"\s*(?:user|assistant|system)\s*:?\s*", re.I)

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
        if _ROLE_LINE.fullmatch(line):
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

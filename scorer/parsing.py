"""Text normalisation, multiple-choice option parsers and the silence test.

Normalisation (metrics spec section 2): drop `<think>...</think>` blocks, cut at a line that
is only a chat role, drop a leading colon, lowercase, collapse whitespace.

Two option parsers, named by the scoring profiles:
- `strict`: the normalised output must be a bare label: `b`, `b.`, `(b)` or `[b]`.
- `recoverable` (TRACE's): exactly one unambiguous label, also when introduced
  ("Answer: B", "The answer is B") or followed by option text ("B. candy").
The grammar of `recoverable` is documented in docs/metrics.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# An unclosed <think> block swallows the rest: the model never got to its answer.
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S | re.I)
_ROLE_LINE = re.compile(r"\s*(?:user|assistant|system)\s*:?\s*", re.I)
_SPACE = re.compile(r"\s+")

_STRICT = re.compile(r"\(([a-z])\)|\[([a-z])\]|([a-z])\.?")
_OPTION_LABEL = re.compile(r"\s*[(\[]?([A-Za-z])\s*[)\].:]")
# Label first, with an explicit separator, then (optionally) anything: "B. candy", "(B) x".
_LEADING = re.compile(
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
    """Normalisation without lowercasing (the recoverable parser needs the case)."""
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


def normalise(text: str) -> str:
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


def parse_strict(text: str, labels: Sequence[str]) -> str | None:
    match = _STRICT.fullmatch(normalise(text))
    if match is None:
        return None
    label = next(group for group in match.groups() if group).upper()
    return label if label in labels else None


def parse_recoverable(text: str, labels: Sequence[str]) -> str | None:
    strict = parse_strict(text, labels)
    if strict is not None:
        return strict
    cleaned = clean(text)
    found = _leading_label(cleaned) or _introduced_label(cleaned)
    if found is None:
        return None
    label, end = found
    if label not in labels:
        return None
    mentioned = _mentions(cleaned[end:], labels)
    return label if mentioned <= {label} else None


def _leading_label(text: str) -> tuple[str, int] | None:
    match = _LEADING.fullmatch(text)
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
}


def is_answer(text: str, silence_tokens: Sequence[str]) -> bool:
    """An answered episode: normalised text not empty and not a silence token.

    Trailing `.`/`!` are ignored for the silence test ("Silent." is silence).
    """
    core = normalise(text).rstrip(".! ")
    return bool(core) and core not in silence_tokens

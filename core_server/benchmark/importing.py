"""What every benchmark importer shares: errors, problems, strict JSON reading, option labels.

An importer converts the source's entries one by one. An entry that cannot be converted
becomes a `Problem` naming its file and position, and the others are still converted, so
that `streameval data validate` can list every broken entry at once; `load_benchmark`
refuses a source with any problem. A file that cannot be read at all raises
`BenchmarkError`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from streameval.core.benchmark.records import Benchmark, Record
from streameval.core.errors import CoreError

T = TypeVar("T")


class BenchmarkError(CoreError):
    """A benchmark that cannot be loaded; the message names the file and the problem."""


class EntryError(CoreError, ValueError):
    """One source entry that cannot be converted; the message names the field."""


@dataclass(frozen=True, slots=True)
class Problem:
    where: str  # a file and position, a record id or a video path
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class Imported:
    """The result of importing a source: its records, what was wrong, what to know."""

    format: str  # "trace", "ovo_bench", "streamingbench" or "benchmark_json"
    benchmark: Benchmark
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # warnings that do not stop a run


def read_json(path: Path) -> Any:
    """Parse a whole JSON file; a malformed one is named with its line and column."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkError(
            f"{path} is not valid JSON at line {exc.lineno}, column {exc.colno}: {_reason(exc)}"
        ) from None


def read_jsonl(path: Path) -> tuple[list[tuple[int, Any]], list[Problem]]:
    """(line number, value) of every non-empty line, and a problem for each malformed line."""
    rows: list[tuple[int, Any]] = []
    problems: list[Problem] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            where = f"{path.name}:{number}"
            problems.append(Problem(where, f"not valid JSON at column {exc.colno}: {_reason(exc)}"))
    return rows, problems


def _reason(exc: json.JSONDecodeError) -> str:
    # The decoder's messages expect its own ": line L column C" suffix ("... starting at").
    return exc.msg.removesuffix(" at").lower()


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BenchmarkError(f"{path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise BenchmarkError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise BenchmarkError(f"{path} cannot be read: {exc.strerror}") from None


_JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "true/false"}


def require(raw: Any, name: str, kind: type[T] | tuple[type, ...]) -> T:
    """`raw[name]`, which must be present and of `kind` (bool never passes for a number)."""
    if not isinstance(raw, dict):
        found = "null" if raw is None else _JSON_TYPES.get(type(raw), "a number")
        raise EntryError(f"entry is {found}, not an object")
    if name not in raw or raw[name] is None:
        raise EntryError(f"missing field {name!r}")
    value = raw[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise EntryError(f"field {name!r} is {value!r}, not {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if float in kinds:  # "a number" covers the integers
        kinds = tuple(k for k in kinds if k is not int)
    names = {int: "an integer", float: "a number", **_JSON_TYPES}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


NUMBER = (int, float)


def string_list(raw: Any, name: str) -> list[str]:
    """A list of strings; numbers (an OCR option "3352" may be stored as 3352) become text."""
    values = require(raw, name, list)
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise EntryError(f"field {name!r} holds {value!r}, not text")
    return [str(value) for value in values]


def convert(where: str, build: Callable[[], T], problems: list[Problem]) -> T | None:
    """`build()`, or None with a problem at `where` when the entry cannot be converted."""
    try:
        return build()
    except EntryError as exc:
        problems.append(Problem(where, str(exc)))
    except ValidationError as exc:
        first = exc.errors()[0]
        location = ".".join(str(part) for part in first["loc"])
        problems.append(Problem(where, f"{location}: {first['msg']}"))
    except (TypeError, KeyError, IndexError, AttributeError) as exc:
        # `build` only reads source data, so these mean a shape the checks did not foresee;
        # the entry is reported, never a traceback.
        problems.append(Problem(where, f"unexpected structure: {exc!r}"))
    return None


def duplicate_ids(records: Iterable[Record]) -> list[Problem]:
    seen: set[str] = set()
    problems = []
    for record in records:
        if record.record_id in seen:
            problems.append(Problem(record.record_id, "duplicate record id"))
        seen.add(record.record_id)
    return problems


_LABEL = re.compile(r"^\s*([A-Z])[.)]\s*")


def option_letter(index: int) -> str:
    return chr(ord("A") + index)


def label_options(options: Sequence[str]) -> tuple[str, ...]:
    """Every option as "A. text": an option already labelled with its own letter ("A." or
    "A)") keeps its text, any other gets the label of its position."""
    labelled = []
    for index, option in enumerate(options):
        letter = option_letter(index)
        match = _LABEL.match(option)
        text = option[match.end() :] if match and match.group(1) == letter else option
        labelled.append(f"{letter}. {text.strip()}")
    return tuple(labelled)


def content_version(paths: Iterable[Path]) -> str:
    """A version for sources that carry none: the digest of the files read."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return f"sha256:{digest.hexdigest()[:16]}"

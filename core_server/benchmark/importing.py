"""What every benchmark importer shares: errors, problems, strict JSON reading, option labels.

An importer converts the source's entries one by one. An entry that cannot be converted
becomes a `Problem` naming its file and position, and the others are still converted, so
that `streameval data validate` can list every broken entry at once; `load_benchmark`
refuses a source with any problem. A file that cannot be read at all raises
`BenchmarkError`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import ValidationError

from streameval.core.benchmark.records import Benchmark, QARecord, Record
from streameval.core.errors import CoreError
from streameval.protocol import MAX_TASK_TEXT_BYTES

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


# Limits on what a benchmark file may hold, so that a hostile or broken file is one error line
# instead of a RecursionError, a ValueError of Python's int parser (4,300 digits) or an
# OverflowError further on. Real benchmark files nest at most 6 levels and hold numbers of a
# few digits; docs/security.md lists the limits.
MAX_JSON_DEPTH = 64  # nested lists and objects
MAX_NUMBER_CHARS = 50  # characters of one number literal (sign, digits, point, exponent)
# Bytes a file is read in: one JSONL line (a TRACE record is a few kilobytes) and one JSON
# document (OVO-Bench's and StreamingBench's files are a few megabytes). Past them nothing
# more is held in memory: a 300 MB line costs a 4 MiB buffer, not 1.3 GB of text and objects.
MAX_LINE_BYTES = 4 * 1024 * 1024
MAX_JSON_FILE_BYTES = 64 * 1024 * 1024
_SKIP_CHUNK = 1024 * 1024  # what the rest of an overlong line is skipped in


class JsonLimitError(ValueError):
    """A JSON text over one of the limits above, or holding text that is not Unicode; the
    message says where (a JSON path) and which limit. `literal` is a too-long number."""

    def __init__(self, message: str, literal: str | None = None) -> None:
        super().__init__(message)
        self.literal = literal


def parse_json(text: str) -> Any:
    """json.loads within the limits: raises json.JSONDecodeError or JsonLimitError.

    NaN, Infinity and numbers too large for a float (1e400) still parse: the record check
    (`non_finite_problems`) names the record and field that holds them.
    """
    try:
        value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except RecursionError:
        # The C parser stops near Python's recursion limit (1,000), far above ours.
        raise JsonLimitError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    _check_tree(value)
    return value


def _check_length(literal: str) -> None:
    if len(literal) > MAX_NUMBER_CHARS:
        raise JsonLimitError(
            f"a number of {len(literal)} characters is longer than the limit of {MAX_NUMBER_CHARS}",
            literal,
        )


def _parse_int(literal: str) -> int:
    _check_length(literal)
    return int(literal)


def _parse_float(literal: str) -> float:
    _check_length(literal)
    return float(literal)


@dataclass(frozen=True, slots=True)
class _Node:
    value: Any
    depth: int
    parent: _Node | None = None
    key: str | int | None = None

    def path(self) -> str:
        """Where the node lies, as a JSON path: `[3].question`, `the top level`."""
        parts: list[str] = []
        node: _Node | None = self
        while node is not None and node.key is not None:
            parts.append(f"[{node.key}]" if isinstance(node.key, int) else f".{node.key}")
            node = node.parent
        joined = "".join(reversed(parts)).removeprefix(".")
        return joined or "the top level"


def _check_tree(value: Any) -> None:
    """Depth and Unicode, checked without recursion (a deep value would overflow the stack):
    a lone surrogate ("\\ud800" in the file) is valid JSON but no valid text; it cannot be
    printed, stored in PostgreSQL or encoded to UTF-8, so it is refused here."""
    if isinstance(value, str):
        _check_text(value, _Node(value, 0))
        return
    # Only containers become nodes: a benchmark has far more scalars, whose node is made
    # only to name the path of a bad one (every worker joining a run loads the file).
    stack = [_Node(value, 0)] if isinstance(value, (dict, list)) else []
    while stack:
        node = stack.pop()
        item = node.value
        if node.depth >= MAX_JSON_DEPTH:
            # No path: it would be MAX_JSON_DEPTH steps long.
            raise JsonLimitError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            if isinstance(key, str) and not _is_text(key):
                _check_text(key, _Node(key, node.depth, node, "<key>"))
            if isinstance(child, str):
                if not _is_text(child):
                    _check_text(child, _Node(child, node.depth + 1, node, _safe_key(key)))
            elif isinstance(child, (dict, list)):
                stack.append(_Node(child, node.depth + 1, node, _safe_key(key)))


def _safe_key(key: str | int) -> str | int:
    # A key holding a surrogate is reported on its own; its path must still print.
    return key if isinstance(key, int) or _is_text(key) else repr(key)


def _is_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(text: str, node: _Node) -> None:
    if not _is_text(text):
        bad = next(c for c in text if 0xD800 <= ord(c) <= 0xDFFF)
        raise JsonLimitError(
            f"{node.path()}: lone surrogate \\u{ord(bad):04x} is not valid Unicode text"
        )


def _limit_message(exc: JsonLimitError, text: str) -> str:
    """The message, with the line and column of a too-long number."""
    at = text.find(exc.literal) if exc.literal else -1
    if at < 0:
        return str(exc)
    line = text.count("\n", 0, at) + 1
    column = at - text.rfind("\n", 0, at)
    return f"line {line}, column {column}: {exc}"


def read_json(path: Path) -> Any:
    """Parse a whole JSON file; a malformed one is named with its line and column."""
    text = _decoded(path, _read_capped(path), 0)
    try:
        return parse_json(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkError(
            f"{path} is not valid JSON at line {exc.lineno}, column {exc.colno}: {_reason(exc)}"
        ) from None
    except JsonLimitError as exc:
        raise BenchmarkError(f"{path}: {_limit_message(exc, text)}") from None


def read_jsonl(path: Path) -> tuple[list[tuple[int, Any]], list[Problem]]:
    """(line number, value) of every non-empty line, and a problem for each malformed line
    or line longer than MAX_LINE_BYTES (never held whole: the file is read line by line)."""
    rows: list[tuple[int, Any]] = []
    problems: list[Problem] = []
    for number, line in _lines(path, problems):
        if not line.strip():
            continue
        where = f"{path.name}:{number}"
        try:
            rows.append((number, parse_json(line)))
        except json.JSONDecodeError as exc:
            problems.append(Problem(where, f"not valid JSON at column {exc.colno}: {_reason(exc)}"))
        except JsonLimitError as exc:
            problems.append(Problem(where, _limit_message(exc, line).removeprefix("line 1, ")))
    return rows, problems


def _lines(path: Path, problems: list[Problem]) -> Iterator[tuple[int, str]]:
    """(number, text) of each line split at "\n" ("\r\n" too), read at most MAX_LINE_BYTES
    at a time; a longer line becomes a problem and is skipped without being kept."""
    offset = 0
    with _opened(path) as file:
        for number in itertools.count(1):
            raw = file.readline(MAX_LINE_BYTES + 2)  # the line and its "\r\n"
            if not raw:
                return
            start, offset = offset, offset + len(raw)
            line = raw.removesuffix(b"\n").removesuffix(b"\r")
            if len(line) > MAX_LINE_BYTES:
                if not raw.endswith(b"\n"):
                    offset += _skip_line(file)
                problems.append(Problem(f"{path.name}:{number}", _too_long("line", MAX_LINE_BYTES)))
                continue
            yield number, _decoded(path, line, start)


def _skip_line(file: BinaryIO) -> int:
    """Read past the rest of the current line in bounded chunks; the bytes skipped."""
    skipped = 0
    while chunk := file.readline(_SKIP_CHUNK):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _too_long(what: str, limit: int) -> str:
    return f"{what} longer than the limit of {limit // (1024 * 1024)} MiB ({limit} bytes)"


def _read_capped(path: Path) -> bytes:
    """The file's bytes, refused past MAX_JSON_FILE_BYTES (read no further: a file that
    grows, or a device such as /dev/zero, is not read to its end)."""
    with _opened(path) as file:
        data = file.read(MAX_JSON_FILE_BYTES + 1)
    if len(data) > MAX_JSON_FILE_BYTES:
        raise BenchmarkError(f"{path}: {_too_long('JSON file', MAX_JSON_FILE_BYTES)}")
    return data


@contextmanager
def _opened(path: Path) -> Iterator[BinaryIO]:
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise BenchmarkError(f"{path} does not exist") from None
    except OSError as exc:
        raise BenchmarkError(f"{path} cannot be read: {exc.strerror}") from None
    with file:
        try:
            yield file
        except OSError as exc:  # EISDIR on read, EIO
            raise BenchmarkError(f"{path} cannot be read: {exc.strerror}") from None


def _decoded(path: Path, data: bytes, offset: int) -> str:
    """`data` as UTF-8 text; `offset` is where it starts in the file, for the message."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BenchmarkError(f"{path} is not UTF-8 text (byte {offset + exc.start})") from None


def non_finite_problems(records: Iterable[Record]) -> list[Problem]:
    """A problem for each record holding NaN or an infinity (a time, a window, a metadata
    value), naming the record and the field: such a time cannot be compared with another,
    and PostgreSQL refuses it in a stored record. A record may have several."""
    problems = []
    for record in records:
        for field_path, value in _floats(record.model_dump(mode="python"), ""):
            if not math.isfinite(value):
                problems.append(
                    Problem(record.record_id, f"{field_path} is {value}, not a finite number")
                )
    return problems


def _floats(value: Any, where: str) -> Iterator[tuple[str, float]]:
    """Every float inside a record's dump, with its field path. Records are built from
    depth-checked JSON, so the recursion is shallow."""
    if isinstance(value, float):
        yield where, value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _floats(child, f"{where}.{key}" if where else str(key))
    elif isinstance(value, (list, tuple)):
        for index, child in enumerate(value):
            yield from _floats(child, f"{where}[{index}]")


def task_text_problems(records: Iterable[Record]) -> list[Problem]:
    """A problem for each task text over MAX_TASK_TEXT_BYTES (a question with its options,
    a probe's, an instruction), naming the record, the task and the limit: the Core sends
    each task as one protocol message, which has a size limit of its own."""
    problems = []
    for record in records:
        for what, texts in _task_texts(record):
            size = len(json.dumps(texts, ensure_ascii=False).encode())
            if size > MAX_TASK_TEXT_BYTES:
                message = (
                    f"{what} is {size} bytes of JSON text, over the limit of "
                    f"{MAX_TASK_TEXT_BYTES} bytes for one task (docs/security.md)"
                )
                problems.append(Problem(record.record_id, message))
    return problems


def _task_texts(record: Record) -> Iterator[tuple[str, list[str]]]:
    if isinstance(record, QARecord):
        yield "the question with its options", [record.question, *record.options]
        return
    yield "the instruction", [record.instruction]
    for index, probe in enumerate(record.probes):
        yield f"probe {index}'s question with its options", [probe.question, *probe.options]


def without_unusable(imported: Imported) -> Imported:
    """`imported` less the records holding NaN or an infinity or a task text over its limit,
    each of them a problem (as an entry that could not be converted): `data validate` lists
    them and a run refuses the benchmark before it creates anything."""
    records = imported.benchmark.records
    found = non_finite_problems(records) + task_text_problems(records)
    if not found:
        return imported
    bad = {problem.where for problem in found}
    kept = [r for r in records if r.record_id not in bad]
    benchmark = imported.benchmark.model_copy(update={"records": kept})
    return replace(imported, benchmark=benchmark, problems=[*imported.problems, *found])


def _reason(exc: json.JSONDecodeError) -> str:
    # The decoder's messages expect its own ": line L column C" suffix ("... starting at").
    return exc.msg.removesuffix(" at").lower()


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
        _hash_into(digest, path)
    return f"sha256:{digest.hexdigest()[:16]}"


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file, read in chunks (a release's files may be large)."""
    digest = hashlib.sha256()
    _hash_into(digest, path)
    return digest.hexdigest()


def _hash_into(digest: Any, path: Path) -> None:
    with _opened(path) as file:
        for chunk in iter(lambda: file.read(_SKIP_CHUNK), b""):
            digest.update(chunk)

"""Score from a JSONL export (`streameval export`) in one pass, one session at a time.

The export is a run line, the record lines, the session lines, then the events, which
`export_jsonl` (core_server/store/export.py) writes as `Store.iter_events` gives them:
ordered by (session_id, seq), as docs/events.md specifies. Scoring assembles one session at a time
(episodes.assemble), so the reader needs only part of that order: each session's events
together, in rising seq. A file that breaks it fails on the first line out of place, with
one line naming the file, the line and the session. It does not fall back to reading the
file another way: that would mean holding every event (the memory this reader exists to
avoid) or reading the file once per session, to accept an order that no streameval command
writes.

An export ends with a line that counts its runs, sessions and events. The reader checks it
when the events have been read (before any judge is asked): a file without it (cut short, or
written by an older streameval) or whose counts differ from the lines read is refused with
one line saying it is incomplete, unless it is opened with `allow_partial`: then what is
missing is added to the source's `incomplete`, and the scores say so. A last line cut
mid-way (no line end, not JSON) is where the file was cut: it is left out, not called
malformed.

The header lines are read when the source is opened (records are needed before any event);
the events are read each time the source's `events` is iterated, straight from the file, and
handed on one at a time: memory does not grow with the number of events. An event line takes
one msgspec call, which decodes it and checks its fields' names and JSON types in C, and one
pydantic-core call, which builds its payload's model (the typed payload the scorer reads, as
from the store). msgspec is here because it measured cheapest (bench/bench_scoring.py): the
standard library's json alone costs more than this whole check, and orjson plus the same
checks in Python cost 20% more. Any line that fails the fast way is read again the slow
way, which upgrades a payload of an older Core or names the problem in the words
`read_jsonl` uses for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

import msgspec
from pydantic import ValidationError

from streameval.core.store.export import (
    END_FIELDS,
    EVENT_FIELDS,
    NO_END_LINE,
    RECORD_FIELDS,
    RUN_FIELDS,
    SCHEMA,
    SESSION_FIELDS,
    STRICT_JSON,
    count_problem,
    line_problem,
)
from streameval.events import PAYLOAD_MODELS, EventPayload, PayloadError, read_payload
from streameval.scorer.errors import ScoreError
from streameval.scorer.source import RUN_FIELDS as SCORED_RUN_FIELDS
from streameval.scorer.source import EventRow, RunSource

_LINE_ORDER = ("run", "record", "session", "event", "end")


class EventLine(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """An event line as EVENT_FIELDS describes it, checked by msgspec as it decodes: every
    field present, none unknown, each of its JSON type (an int is no bool; a video_t may be
    an int, which becomes a float, as the store holds it)."""

    type: Literal["event"]
    session_id: str
    seq: int
    kind: str
    runtime_ns: int
    video_t: float | None
    payload: dict[str, Any]


_decode_event = msgspec.json.Decoder(EventLine).decode
_decode_any = msgspec.json.Decoder().decode
# Each kind's dict-to-model validator: the only per-event pydantic call.
_PAYLOADS: Mapping[str, Callable[[Any], EventPayload]] = {
    kind.value: model.__pydantic_validator__.validate_python
    for kind, model in PAYLOAD_MODELS.items()
}


class _LineError(Exception):
    """A line's problem, before the file and line number are put to it."""


class _EventsEnd(Exception):
    """The events end here: at the end line (`end`), or at a last line cut short (None)."""

    def __init__(self, end: dict[str, Any] | None) -> None:
        super().__init__()
        self.end = end


def _cut(line: bytes) -> bool:
    """Whether a line that is not JSON is where the file was cut: the last line, unended."""
    return not line.endswith(b"\n")


@dataclass
class Header:
    """What precedes the events, and where the events begin."""

    run: dict[str, Any]  # the run line without "type" and "schema"
    records: list[dict[str, Any]] = field(default_factory=list)  # record lines, no "type"
    sessions: int = 0  # session lines
    events_at: int = 0  # byte offset of the first event line (or of the end line)
    events_line: int = 1  # its line number
    allow_partial: bool = False
    # What the file lacks, when allow_partial lets it be read: filled when its events have
    # been read, and shared with the source, whose scores report it.
    incomplete: list[str] = field(default_factory=list)


def open_exported(path: str | Path, allow_partial: bool = False) -> RunSource:
    """A RunSource over an export: the header read now, the events each time they are read.
    An incomplete export fails when its events have been read, unless `allow_partial`."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            header = read_header(path, handle)
    except FileNotFoundError:
        raise ScoreError(f"event log {path} does not exist") from None
    except IsADirectoryError:
        raise ScoreError(f"event log {path} is a directory, not a JSONL file") from None
    header.allow_partial = allow_partial
    run = {name: header.run[name] for name in SCORED_RUN_FIELDS}

    def events(session_id: str | None = None) -> Iterator[EventRow]:
        rows = read_events(path, header)
        return rows if session_id is None else _one_session(rows, session_id)

    return RunSource(run, header.records, events, header.incomplete)


def incomplete_message(path: Path, problem: str) -> str:
    return (
        f"{path} is incomplete: {problem}; export the run again, or pass --allow-partial to "
        "score what it holds"
    )


def read_header(path: Path, handle: BinaryIO) -> Header:
    """Read and check the lines before the first event; the handle is left past them."""
    header: Header | None = None
    last_type, number = "", 0
    while True:
        offset = handle.tell()
        line = handle.readline()
        if not line:
            break
        number += 1
        try:
            obj = _decode(line)
            kind = _line_type(obj, header is not None, last_type)
        except _LineError as exc:
            if header is None or not _cut(line):
                raise _error(path, number, str(exc)) from None
            kind = "cut"  # the events' reader meets it again, and leaves it out
        if kind in ("event", "end", "cut"):
            assert header is not None
            header.events_at, header.events_line = offset, number
            return header
        last_type = kind
        header = _add_header_line(path, number, header, obj)
    if header is None:
        raise ScoreError(f"{path}: empty file, expected a run line")
    header.events_at, header.events_line = offset, number + 1
    return header


def _add_header_line(path: Path, number: int, header: Header | None, obj: dict[str, Any]) -> Header:
    kind = obj["type"]
    try:
        if kind == "run":
            if header is not None:
                raise _LineError("a second run line")
            _check(obj, RUN_FIELDS, exact=True)
            if obj["schema"] != SCHEMA:
                raise _LineError(f"unsupported schema {obj['schema']!r}; expected {SCHEMA}")
            return Header({k: v for k, v in obj.items() if k not in ("type", "schema")})
        assert header is not None  # _line_type saw to it
        if kind == "record":
            _check(obj, RECORD_FIELDS, exact=False)
            header.records.append({k: v for k, v in obj.items() if k != "type"})
        else:  # the scorer reads no session line, but a malformed one is still an error
            _check(obj, SESSION_FIELDS, exact=True)
            header.sessions += 1
    except _LineError as exc:
        raise _error(path, number, str(exc)) from None
    return header


def read_events(path: Path, header: Header) -> Iterator[EventRow]:
    """The export's events as scoring rows, in file order, each session's together; then
    the end line's counts checked against the lines read."""
    # Once per event: the fast way is written out here, with local names, so that a line
    # costs its two calls and little else (helper calls around them cost a tenth more).
    decode, payloads = _decode_event, _PAYLOADS
    finished: set[str] = set()
    session: str | None = None
    last_seq = -1
    end: dict[str, Any] | None = None
    number = header.events_line - 1
    with path.open("rb") as handle:
        handle.seek(header.events_at)
        lines = enumerate(handle, start=header.events_line)
        for number, line in lines:
            try:
                try:
                    event = decode(line)
                    payload = payloads[event.kind](event.payload)
                    row = (
                        event.session_id,
                        event.seq,
                        event.kind,
                        event.runtime_ns,
                        event.video_t,
                        payload,
                    )
                except (msgspec.MsgspecError, KeyError, ValidationError):
                    row = _slow_row(line)
                if row[0] != session:
                    _check_new_session(row[0], session, finished)
                    session, last_seq = row[0], -1
                if row[1] <= last_seq:
                    raise _LineError(
                        f"event seq {row[1]} of session {session!r} follows seq {last_seq}; "
                        "each session's events must be in rising seq order, as `streameval "
                        "export` writes them"
                    )
                last_seq = row[1]
            except _LineError as exc:
                raise _error(path, number, str(exc)) from None
            except _EventsEnd as stop:
                end = stop.end
                following = next(lines, None)
                if end is not None and following is not None:
                    raise _error(path, following[0], "a line cannot follow the end line") from None
                break
            yield row
        else:
            number += 1  # the events ran to the end of the file
    _check_complete(path, header, end, number - header.events_line)


def _check_complete(path: Path, header: Header, end: dict[str, Any] | None, events: int) -> None:
    """Refuse an export whose end line is missing or counts other lines than were read;
    with allow_partial, say what it lacks instead."""
    read = {"runs": 1, "sessions": header.sessions, "events": events}
    problem = NO_END_LINE if end is None else count_problem(end, read)
    if problem is None:
        return
    if not header.allow_partial:
        raise ScoreError(incomplete_message(path, problem))
    said = f"{path} is incomplete: {problem}"
    if said not in header.incomplete:  # the events may be read more than once
        header.incomplete.append(said)


def _check_new_session(session_id: str, previous: str | None, finished: set[str]) -> None:
    """A session's events begin: they must not have begun before."""
    if session_id in finished:
        raise _LineError(
            f"events of session {session_id!r} resume after those of session {previous!r}; "
            "the scorer reads an export one session at a time, so each session's events "
            "must be together, in seq order, as `streameval export` writes them"
        )
    if previous is not None:
        finished.add(previous)


def _slow_row(line: bytes) -> EventRow:
    """An event line the fast way refused: its payload upgraded, or its problem named; the
    end line, or a last line cut short, ends the events (_EventsEnd)."""
    try:
        obj = _decode(line)
    except _LineError:
        if _cut(line):
            raise _EventsEnd(None) from None
        raise
    if _line_type(obj, True, "event") == "end":  # after events, other types are refused
        _check(obj, END_FIELDS, exact=True)
        raise _EventsEnd(obj)
    _check(obj, EVENT_FIELDS, exact=True)
    try:
        payload = read_payload(obj["kind"], obj["payload"])
    except PayloadError as exc:
        raise _LineError(str(exc)) from None
    return (
        obj["session_id"],
        obj["seq"],
        obj["kind"],
        obj["runtime_ns"],
        obj["video_t"],
        payload,
    )


def _one_session(rows: Iterable[EventRow], session_id: str) -> Iterator[EventRow]:
    """One session's rows; the reading stops once they are past (they are contiguous)."""
    found = False
    for row in rows:
        if row[0] == session_id:
            found = True
            yield row
        elif found:
            return


def _decode(line: bytes) -> dict[str, Any]:
    try:
        obj = _decode_any(line)
    except msgspec.DecodeError as exc:
        raise _LineError(_json_problem(line, exc)) from None
    if not isinstance(obj, dict):
        raise _LineError("expected a JSON object")
    return obj


def _json_problem(line: bytes, exc: msgspec.DecodeError) -> str:
    """Why a line is not JSON, as the standard library's parser puts it (msgspec counts
    bytes, and calls NaN just an invalid character)."""
    try:  # without its newline, or an unfinished line's error is at "column 1" of the next
        # The standard library's messages say what is wrong in the terms `read_jsonl`
        # reports (NaN and Infinity, which Python's json accepts, are refused).
        STRICT_JSON.decode(line.rstrip(b"\r\n").decode("utf-8"))
    except UnicodeDecodeError as error:
        return f"not valid UTF-8 (byte {error.start + 1})"
    except json.JSONDecodeError as error:
        return f"not valid JSON ({error.msg} at column {error.colno})"
    except ValueError as error:
        return f"not valid JSON ({error})"
    return f"not valid JSON ({exc})"


def _line_type(obj: dict[str, Any], after_run: bool, last_type: str) -> str:
    """The line's type, if it may come here: the run line first, then records, sessions
    and events, each type's lines together."""
    kind = obj.get("type")
    if kind not in _LINE_ORDER:
        raise _LineError(f"unknown line type {kind!r}")
    if not after_run and kind != "run":
        raise _LineError(f"the first line must be the run line, not {kind!r}")
    if after_run and last_type and _LINE_ORDER.index(kind) < _LINE_ORDER.index(last_type):
        raise _LineError(f"a {kind} line cannot follow {last_type} lines")
    return kind


def _check(obj: dict[str, Any], fields: dict[str, tuple[type, ...]], exact: bool) -> None:
    problem = line_problem(obj, fields, exact)
    if problem is not None:
        raise _LineError(problem)


def _error(path: Path, number: int, problem: str) -> ScoreError:
    return ScoreError(f"{path}: line {number}: {problem}")

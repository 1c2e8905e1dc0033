"""Export one run as JSON Lines (`streameval-events/1`) and read such a file back.

The format is documented line by line in docs/events.md: a run line, then one line per
record, per session and per event (in session, seq order), then an end line that counts the
runs, sessions and events written. It carries everything the scorer needs, so a run can be
scored or archived without the database. Reading an export validates every event's payload
against its kind's model (streameval.events) once, and refuses a file whose end line is
missing or counts other lines than it holds: a file cut at a line boundary reads as a
well-formed but smaller run, so only the end line tells it apart.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from streameval.core.errors import CoreError
from streameval.core.store.store import RunInfo, SessionInfo, Store
from streameval.events import PAYLOAD_MODELS, Event, PayloadError, read_payload

SCHEMA = "streameval-events/1"

# Fields of each line type, with the JSON types each may hold (None = null allowed).
_STR, _INT, _NUM, _OBJ, _LIST = (str,), (int,), (int, float), (dict,), (list,)
_OPT_STR = (str, type(None))
RUN_FIELDS: dict[str, tuple[type, ...]] = {
    "type": _STR,
    "schema": _STR,
    "run_id": _STR,
    "created_at": _STR,
    "status": _STR,
    "benchmark": _STR,
    "config": _OBJ,
    "config_hash": _STR,
    "versions": _OBJ,
    "conditions": _OBJ,
    "finished_at": _OPT_STR,
}
SESSION_FIELDS: dict[str, tuple[type, ...]] = {
    "type": _STR,
    "run_id": _STR,
    "session_id": _STR,
    "record_ids": _LIST,
    "status": _STR,
    "attempt": _INT,
    "endpoint": _OPT_STR,
    "failure_stage": _OPT_STR,
    "failure_reason": _OPT_STR,
    "started_at": _OPT_STR,
    "finished_at": _OPT_STR,
}
EVENT_FIELDS: dict[str, tuple[type, ...]] = {
    "type": _STR,
    "session_id": _STR,
    "seq": _INT,
    "kind": _STR,
    "runtime_ns": _INT,
    "video_t": (int, float, type(None)),
    "payload": _OBJ,
}
RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "type": _STR,
    "record_id": _STR,
    "task": _STR,
    "task_type": _STR,
    "source_benchmark": _STR,
    "video_path": _STR,
}
# The end line: what was written, counted, so that a reader can tell a whole export from
# one cut short (a killed export, a partial copy).
END_FIELDS: dict[str, tuple[type, ...]] = {
    "type": _STR,
    "runs": _INT,
    "sessions": _INT,
    "events": _INT,
}
COUNTED = ("runs", "sessions", "events")
_LINE_ORDER = ("run", "record", "session", "event", "end")
NO_END_LINE = (
    "it has no end line, so lines may be missing from its end (the export was cut short, or "
    "was written by an older streameval, whose exports end without one)"
)


class _EventLine(BaseModel):
    """An event line as EVENT_FIELDS describes it; one subclass per kind adds the payload."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    type: Literal["event"]
    session_id: str
    seq: int
    runtime_ns: int
    video_t: float | None


# The event lines of every kind, told apart by `kind`: one pydantic call parses a line and
# checks its fields and its payload (about as fast as json.loads alone, against twice that
# for decoding, checking and validating separately). Only good lines take this way: any
# failure reads the line again the slow way, which names the problem.
_EVENT_LINES: TypeAdapter[Any] = TypeAdapter(
    Annotated[
        Union[  # noqa: UP007 (a tuple of types is spelled with Union)
            tuple(
                create_model(
                    f"{model.__name__}Line",
                    __base__=_EventLine,
                    kind=(Literal[kind.value], ...),
                    payload=(model, ...),
                )
                for kind, model in PAYLOAD_MODELS.items()
            )
        ],
        Field(discriminator="kind"),
    ]
)


class ExportFormatError(CoreError):
    """A JSONL export is malformed; the message names the file and line."""


@dataclass
class ExportedRun:
    run: dict[str, Any]  # the run line without "type" and "schema"
    records: list[dict[str, Any]]  # record lines without "type"
    sessions: list[dict[str, Any]]  # session lines without "type"
    events: list[Event]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat(timespec="microseconds")


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def run_line(run: RunInfo) -> dict[str, Any]:
    line = {"type": "run", "schema": SCHEMA, **asdict(run)}
    line["created_at"] = _iso(run.created_at)
    line["finished_at"] = _iso(run.finished_at)
    return line


# Session columns the export leaves out, because the line format is fixed: the event log
# already carries the first two (the `adapter_hello` event and the `cause` of
# `session_failed`); the next say which worker held the session (store/queue.py), and the
# last only orders the claims (the records say what the session streams).
_SESSION_COLUMNS_NOT_EXPORTED = (
    "adapter",
    "failure_cause",
    "lease_owner",
    "lease_expires_at",
    "host",
    "worker_id",
    "expected_s",
)


def session_line(session: SessionInfo) -> dict[str, Any]:
    fields = asdict(session)
    for name in _SESSION_COLUMNS_NOT_EXPORTED:
        fields.pop(name)
    line = {"type": "session", **fields}
    line["started_at"] = _iso(session.started_at)
    line["finished_at"] = _iso(session.finished_at)
    return line


def event_line(event: Event) -> dict[str, Any]:
    return {
        "type": "event",
        "session_id": event.session_id,
        "seq": event.seq,
        "kind": str(event.kind),
        "runtime_ns": event.runtime_ns,
        "video_t": event.video_t,
        "payload": event.payload.model_dump(mode="json"),
    }


def _reject_constant(name: str) -> None:
    # Python's json accepts NaN and Infinity, which are not JSON; the exporter never writes them.
    raise ValueError(f"{name} is not a JSON number")


# One decoder for the whole file: json.loads with an option builds a new one per line.
STRICT_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def line_problem(
    obj: dict[str, Any], fields: dict[str, tuple[type, ...]], exact: bool
) -> str | None:
    """What is wrong with a line against its type's table of fields and JSON types, or
    None. `exact`: fields the table does not list are refused too."""
    if obj.keys() != fields.keys():
        missing = [name for name in fields if name not in obj]
        if missing:
            return f"{obj['type']} line lacks field(s) {', '.join(missing)}"
        extra = [name for name in obj if name not in fields]
        if exact and extra:
            return f"{obj['type']} line has unknown field(s) {', '.join(extra)}"
    for name, types in fields.items():
        value = obj[name]
        # JSON true/false parse as bool, which Python also counts as int.
        if isinstance(value, bool) or not isinstance(value, types):
            wanted = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"field {name!r} must be {wanted}, got {value!r}"
    return None


def count_problem(end: dict[str, Any], read: dict[str, int]) -> str | None:
    """How an end line's counts differ from the lines read (COUNTED), or None."""
    if all(end[name] == read[name] for name in COUNTED):
        return None
    return f"its end line counts {_counts(end)}, but it holds {_counts(read)}"


def _counts(counts: dict[str, Any]) -> str:
    runs, sessions, events = (
        f"{counts[name]} {name if counts[name] != 1 else name[:-1]}" for name in COUNTED
    )
    return f"{runs}, {sessions} and {events}"


def export_jsonl(store: Store, run_id: str, out: TextIO) -> int:
    """Write the run to `out`, its end line last; returns the number of lines. Events are
    streamed."""
    sessions = [session_line(session) for session in store.sessions(run_id)]
    lines = [run_line(store.get_run(run_id))]
    lines += [{"type": "record", **record} for record in store.records(run_id)]
    lines += sessions
    for line in lines:
        out.write(_dumps(line) + "\n")
    events = 0
    for event in store.iter_events(run_id):
        out.write(_dumps(event_line(event)) + "\n")
        events += 1
    out.write(_dumps({"type": "end", "runs": 1, "sessions": len(sessions), "events": events}))
    out.write("\n")
    return len(lines) + events + 1


def read_jsonl(path: str | Path) -> ExportedRun:
    """Read and validate an export; the first problem raises ExportFormatError, and so does
    a file whose end line is missing or counts other lines than it holds."""
    reader = _Reader(Path(path))
    with open(path, encoding="utf-8") as lines:
        for number, text in enumerate(lines, start=1):
            reader.add(number, text)
    return reader.result()


class _Reader:
    """Checks each line's fields and the line order (run, records, sessions, events)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._run: dict[str, Any] | None = None
        self._records: list[dict[str, Any]] = []
        self._sessions: list[dict[str, Any]] = []
        self._events: list[Event] = []
        self._end: dict[str, Any] | None = None
        self._last_type = ""
        self._handlers = {
            "run": self._add_run,
            "record": self._add_record,
            "session": self._add_session,
            "event": self._add_event,
            "end": self._add_end,
        }

    def add(self, number: int, text: str) -> None:
        if self._last_type == "event" and self._add_good_event(text):
            return
        obj = self._parse(number, text)
        kind = obj.get("type")
        if kind not in _LINE_ORDER:
            raise self._error(number, f"unknown line type {kind!r}")
        if self._run is None and kind != "run":
            raise self._error(number, f"the first line must be the run line, not {kind!r}")
        if self._end is not None:
            raise self._error(number, f"a {kind} line cannot follow the end line")
        if kind != self._last_type:
            if self._run is not None and _LINE_ORDER.index(kind) < _LINE_ORDER.index(
                self._last_type
            ):
                raise self._error(number, f"a {kind} line cannot follow {self._last_type} lines")
            self._last_type = kind
        self._handlers[kind](number, obj)

    def _add_good_event(self, text: str) -> bool:
        """Add an event line that follows an event line, if it is good in every respect."""
        try:
            line = _EVENT_LINES.validate_json(text)
        except ValidationError:
            return False
        assert self._run is not None
        self._events.append(
            Event(
                self._run["run_id"],
                line.session_id,
                line.seq,
                line.kind,
                line.runtime_ns,
                line.video_t,
                line.payload,
            )
        )
        return True

    def _parse(self, number: int, text: str) -> dict[str, Any]:
        try:
            obj = STRICT_JSON.decode(text)
        except json.JSONDecodeError as exc:
            raise self._error(number, f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
        except ValueError as exc:
            raise self._error(number, f"not valid JSON ({exc})") from exc
        if not isinstance(obj, dict):
            raise self._error(number, "expected a JSON object")
        return obj

    def _add_run(self, number: int, obj: dict[str, Any]) -> None:
        if self._run is not None:
            raise self._error(number, "a second run line")
        self._check(number, obj, RUN_FIELDS, exact=True)
        if obj["schema"] != SCHEMA:
            raise self._error(number, f"unsupported schema {obj['schema']!r}; expected {SCHEMA}")
        self._run = {k: v for k, v in obj.items() if k not in ("type", "schema")}

    def _add_record(self, number: int, obj: dict[str, Any]) -> None:
        self._check(number, obj, RECORD_FIELDS, exact=False)
        self._records.append({k: v for k, v in obj.items() if k != "type"})

    def _add_session(self, number: int, obj: dict[str, Any]) -> None:
        self._check(number, obj, SESSION_FIELDS, exact=True)
        self._sessions.append({k: v for k, v in obj.items() if k != "type"})

    def _add_event(self, number: int, obj: dict[str, Any]) -> None:
        self._check(number, obj, EVENT_FIELDS, exact=True)
        assert self._run is not None
        try:  # the payload is validated here, once: the Event below takes it as it is
            payload = read_payload(obj["kind"], obj["payload"])
        except PayloadError as exc:
            raise self._error(number, str(exc)) from None
        self._events.append(
            Event(
                run_id=self._run["run_id"],
                session_id=obj["session_id"],
                seq=obj["seq"],
                kind=obj["kind"],
                runtime_ns=obj["runtime_ns"],
                video_t=obj["video_t"],
                payload=payload,
            )
        )

    def _add_end(self, number: int, obj: dict[str, Any]) -> None:
        self._check(number, obj, END_FIELDS, exact=True)
        self._end = obj

    def _check(
        self, number: int, obj: dict[str, Any], fields: dict[str, tuple[type, ...]], exact: bool
    ) -> None:
        problem = line_problem(obj, fields, exact)
        if problem is not None:
            raise self._error(number, problem)

    def _error(self, number: int, message: str) -> ExportFormatError:
        return ExportFormatError(f"{self._path}: line {number}: {message}")

    def result(self) -> ExportedRun:
        if self._run is None:
            raise ExportFormatError(f"{self._path}: empty file, expected a run line")
        read = {"runs": 1, "sessions": len(self._sessions), "events": len(self._events)}
        problem = NO_END_LINE if self._end is None else count_problem(self._end, read)
        if problem is not None:
            raise ExportFormatError(f"{self._path} is incomplete: {problem}")
        return ExportedRun(self._run, self._records, self._sessions, self._events)

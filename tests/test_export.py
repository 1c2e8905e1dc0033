"""JSONL export (`streameval-events/1`): round trip through a real store, and line checks."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from streameval.core.store.export import ExportFormatError, export_jsonl, read_jsonl
from streameval.core.store.store import Store, StoreError
from streameval.events import Event, EventKind
from tests.event_examples import EXAMPLES
from tests.test_store import sample_records

RUN = "export-run"

# The field lists of docs/events.md, written out independently of export.py.
ISO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")
DOC_FIELDS = {
    "run": [
        "type",
        "schema",
        "run_id",
        "created_at",
        "status",
        "benchmark",
        "config",
        "config_hash",
        "versions",
        "conditions",
        "finished_at",
    ],
    "session": [
        "type",
        "run_id",
        "session_id",
        "record_ids",
        "status",
        "attempt",
        "endpoint",
        "failure_stage",
        "failure_reason",
        "started_at",
        "finished_at",
    ],
    "event": ["type", "session_id", "seq", "kind", "runtime_ns", "video_t", "payload"],
    "end": ["type", "runs", "sessions", "events"],
}
RECORD_REQUIRED = {"type", "record_id", "task", "task_type", "source_benchmark", "video_path"}


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_timestamp(value: object, nullable: bool) -> bool:
    return (nullable and value is None) or (isinstance(value, str) and bool(ISO_UTC.match(value)))


def validate_line(line: dict) -> None:
    kind = line["type"]
    if kind == "record":
        assert set(line) >= RECORD_REQUIRED
        assert all(isinstance(line[name], str) for name in RECORD_REQUIRED)
        return
    assert list(line) == DOC_FIELDS[kind]
    if kind == "run":
        assert line["schema"] == "streameval-events/1"
        assert line["status"] in {"created", "running", "finished", "interrupted", "failed"}
        assert is_timestamp(line["created_at"], nullable=False)
        assert is_timestamp(line["finished_at"], nullable=True)
        assert re.fullmatch(r"[0-9a-f]{64}", line["config_hash"])
        assert all(isinstance(line[f], dict) for f in ("config", "versions", "conditions"))
    elif kind == "session":
        assert line["status"] in {"pending", "running", "finished", "failed"}
        assert isinstance(line["record_ids"], list) and is_int(line["attempt"])
        assert is_timestamp(line["started_at"], True) and is_timestamp(line["finished_at"], True)
        for name in ("endpoint", "failure_stage", "failure_reason"):
            assert line[name] is None or isinstance(line[name], str)
    elif kind == "end":
        assert all(is_int(line[name]) for name in ("runs", "sessions", "events"))
    else:
        assert line["kind"] in {k.value for k in EventKind}
        assert is_int(line["seq"]) and is_int(line["runtime_ns"])
        assert line["video_t"] is None or isinstance(line["video_t"], float)
        assert isinstance(line["payload"], dict)


def session_events(session_id: str) -> list[Event]:
    """Six events of different kinds: nulls, unicode and integers beyond 2**53."""
    kinds = [
        EventKind.SESSION_START,
        EventKind.FRAME_SENT,
        EventKind.RESPONSE_START,
        EventKind.RESPONSE_FINAL,
        EventKind.WORKLOAD,
        EventKind.SESSION_FINISHED,
    ]
    return [
        Event(RUN, session_id, seq, kind, 2**53 + 1 + seq, None if seq % 2 else seq * 0.1, body)
        for seq, (kind, body) in enumerate((kind, EXAMPLES[kind]) for kind in kinds)
    ]


def filled_store(store: Store) -> list[Event]:
    store.create_run(RUN, "synthetic", {"fps": 2.0, "pacing": "logical"}, {"state": "native"})
    store.add_records(RUN, sample_records())
    store.add_sessions(RUN, [("s2", ["pro-1"]), ("s1", ["qa-1"])])
    store.set_run_status(RUN, "running")
    events = session_events("s2") + session_events("s1")
    store.append_events(events)
    store.set_session_status(RUN, "s1", "running", endpoint="ws://127.0.0.1:9000")
    store.set_session_status(RUN, "s1", "finished")
    store.set_session_status(RUN, "s2", "failed", stage="streaming", reason="socket closed")
    store.set_run_status(RUN, "finished")
    return sorted(events, key=lambda ev: (ev.session_id, ev.seq))


def test_export_round_trips_exactly_and_follows_the_schema(store: Store, tmp_path: Path) -> None:
    events = filled_store(store)
    path = tmp_path / "run.jsonl"
    with path.open("w", encoding="utf-8") as out:
        written = export_jsonl(store, RUN, out)
    lines = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
    assert written == len(lines) == 1 + 2 + 2 + 12 + 1
    assert [line["type"] for line in lines] == ["run"] + ["record"] * 2 + ["session"] * 2 + [
        "event"
    ] * 12 + ["end"]
    assert lines[-1] == {"type": "end", "runs": 1, "sessions": 2, "events": 12}
    for line in lines:
        validate_line(line)

    exported = read_jsonl(path)
    run = store.get_run(RUN)
    assert exported.run == {
        "run_id": RUN,
        "created_at": run.created_at.isoformat(timespec="microseconds"),
        "status": "finished",
        "benchmark": "synthetic",
        "config": run.config,
        "config_hash": run.config_hash,
        "versions": run.versions,
        "conditions": {"state": "native"},
        "finished_at": run.finished_at.isoformat(timespec="microseconds"),
    }
    assert datetime.fromisoformat(exported.run["created_at"]) == run.created_at
    assert exported.records == store.records(RUN)
    assert [r["record_id"] for r in exported.records] == ["pro-1", "qa-1"]
    assert [s["session_id"] for s in exported.sessions] == ["s1", "s2"]
    s1 = store.sessions(RUN)[0]
    assert exported.sessions[0] == {
        "run_id": RUN,
        "session_id": "s1",
        "record_ids": ["qa-1"],
        "status": "finished",
        "attempt": 0,
        "endpoint": "ws://127.0.0.1:9000",
        "failure_stage": None,
        "failure_reason": None,
        "started_at": s1.started_at.isoformat(timespec="microseconds"),
        "finished_at": s1.finished_at.isoformat(timespec="microseconds"),
    }
    assert (exported.sessions[1]["failure_stage"], exported.sessions[1]["failure_reason"]) == (
        "streaming",
        "socket closed",
    )
    assert exported.events == events == list(store.iter_events(RUN))
    assert exported.events[4].payload.ended_ns == 2**63 - 1
    assert exported.events[3].payload.text == "Grün ✓"


def test_export_of_unknown_run_is_a_store_error(store: Store, tmp_path: Path) -> None:
    with (tmp_path / "x.jsonl").open("w") as out, pytest.raises(StoreError, match="'nope'"):
        export_jsonl(store, "nope", out)


def good_lines(tmp_path: Path) -> list[str]:
    with Store(f"sqlite:///{tmp_path / 'src.db'}") as store:
        filled_store(store)
        path = tmp_path / "good.jsonl"
        with path.open("w", encoding="utf-8") as out:
            export_jsonl(store, RUN, out)
    return path.read_text(encoding="utf-8").splitlines()


def corrupt(lines: list[str], number: int, change) -> list[str]:
    """Apply `change` to the parsed line `number` (1-based); a str replaces the text."""
    out = lines[:]
    if isinstance(change, str):
        out[number - 1] = change
    else:
        obj = json.loads(out[number - 1])
        change(obj)
        out[number - 1] = json.dumps(obj)
    return out


@pytest.mark.parametrize(
    ("number", "change", "message"),
    [
        (7, '{"type": "event", "seq": 1', "line 7: not valid JSON"),
        (8, "", "line 8: not valid JSON"),
        (9, "[1, 2]", "line 9: expected a JSON object"),
        (10, lambda o: o.update(video_t=float("nan")), "line 10: not valid JSON (NaN"),
        (6, lambda o: o.pop("runtime_ns"), "line 6: event line lacks field(s) runtime_ns"),
        (6, lambda o: o.update(seq="1"), "line 6: field 'seq' must be int, got '1'"),
        (6, lambda o: o.update(seq=True), "line 6: field 'seq' must be int"),
        (6, lambda o: o.update(extra=1), "line 6: event line has unknown field(s) extra"),
        (6, lambda o: o.update(type="frame"), "line 6: unknown line type 'frame'"),
        (4, lambda o: o.update(attempt=None), "line 4: field 'attempt' must be int"),
        (2, lambda o: o.pop("video_path"), "line 2: record line lacks field(s) video_path"),
        (1, lambda o: o.update(schema="streameval-events/2"), "line 1: unsupported schema"),
        (1, lambda o: o.update(type="record"), "line 1: the first line must be the run line"),
    ],
)
def test_malformed_line_names_its_number(tmp_path: Path, number, change, message) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(corrupt(good_lines(tmp_path), number, change)) + "\n")
    with pytest.raises(ExportFormatError, match=re.escape(f"{path}: {message}")):
        read_jsonl(path)


def test_line_order_is_enforced(tmp_path: Path) -> None:
    lines = good_lines(tmp_path)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], lines[5], lines[2]]) + "\n")
    with pytest.raises(ExportFormatError, match="line 3: a record line cannot follow event lines"):
        read_jsonl(path)
    path.write_text("\n".join([lines[0], lines[0]]) + "\n")
    with pytest.raises(ExportFormatError, match="line 2: a second run line"):
        read_jsonl(path)
    path.write_text("")
    with pytest.raises(ExportFormatError, match="empty file"):
        read_jsonl(path)

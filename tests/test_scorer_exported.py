"""`streameval score --events`: the scorer reads an export one line at a time (scorer/exported.py).

The same rows and numbers as the whole log read first, and as the store; each session's
events must come together, in seq order (as `streameval export` writes them), or the file
fails with one line naming it; so does any malformed line, with its line number; and the
reader never holds more than the event it is on.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streameval.cli import app
from streameval.core.store.export import EVENT_FIELDS, export_jsonl, read_jsonl
from streameval.core.store.store import Store
from streameval.events import PAYLOAD_MODELS, AdapterHelloPayload
from streameval.scorer.episodes import SessionTrace
from streameval.scorer.errors import ScoreError
from streameval.scorer.exported import EventLine, open_exported
from streameval.scorer.metrics.family import RecordEvaluation, TraceDropped
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import evaluate_source, score_exported, score_run, scores_of
from streameval.scorer.source import RUN_FIELDS, EventRow, RunSource, store_source
from tests.golden_runs import export_text
from tests.test_export import RUN, corrupt, filled_store
from tests.test_scorer_report import mixed_run

runner = CliRunner()
ORDER_RULE = (
    "the scorer reads an export one session at a time, so each session's events must be "
    "together, in seq order, as `streameval export` writes them"
)


def whole_log_source(path: Path) -> RunSource:
    """The export read whole first (the Core's `read_jsonl`), as the scorer once did."""
    exported = read_jsonl(path)
    rows = [
        (e.session_id, e.seq, str(e.kind), e.runtime_ns, e.video_t, e.payload)
        for e in exported.events
    ]
    run = {name: exported.run[name] for name in RUN_FIELDS}
    return RunSource(
        run,
        exported.records,
        lambda session_id=None: [r for r in rows if session_id in (None, r[0])],
    )


def mixed_export(store: Store, tmp_path: Path) -> tuple[Path, list[str]]:
    """A run of five sessions (three QA, two proactive), exported; and its lines."""
    mixed_run(store, "run-a")
    path = tmp_path / "run-a.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        export_jsonl(store, "run-a", handle)
    return path, path.read_text(encoding="utf-8").splitlines()


def event_lines(lines: list[str]) -> dict[str, list[int]]:
    """The 0-based positions of each session's event lines."""
    sessions: dict[str, list[int]] = {}
    for position, line in enumerate(lines):
        obj = json.loads(line)
        if obj["type"] == "event":
            sessions.setdefault(obj["session_id"], []).append(position)
    return sessions


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_all(path: Path) -> list[EventRow]:
    return list(open_exported(path).events(None))


# --- the same numbers ------------------------------------------------------------------------


def test_a_recorded_run_scores_as_its_whole_log_read_first(tmp_path: Path) -> None:
    """The demo run, recorded by the Core (an older Core: its hellos lack `gpu`)."""
    path = tmp_path / "demo.jsonl"
    path.write_text(export_text("demo"), encoding="utf-8")
    for profile in SCORING_PROFILES:
        streamed = scores_of(evaluate_source(open_exported(path), profile))
        whole = scores_of(evaluate_source(whole_log_source(path), profile))
        assert streamed.to_json(include_records=True) == whole.to_json(include_records=True)
    assert streamed.events_scored == len(read_jsonl(path).events) == 1556


def test_a_recorded_run_scores_alike_from_its_export_and_from_a_store(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "demo.jsonl"
    path.write_text(export_text("demo"), encoding="utf-8")
    exported = read_jsonl(path)
    run = exported.run
    store.create_run(run["run_id"], run["benchmark"], run["config"], run["conditions"])
    store.add_records(run["run_id"], exported.records)
    store.add_sessions(
        run["run_id"], [(s["session_id"], s["record_ids"]) for s in exported.sessions]
    )
    store.append_events(exported.events)
    store.set_run_status(run["run_id"], run["status"])
    for profile in SCORING_PROFILES:
        stored = score_run(store, run["run_id"], profile).to_json(include_records=True)
        streamed = score_exported(path, profile).to_json(include_records=True)
        assert stored == streamed, profile


def test_rows_are_those_of_the_whole_log(store: Store, tmp_path: Path) -> None:
    """Integers beyond 2**53, nulls, unicode, float video times: row for row, typed alike."""
    filled_store(store)
    path = tmp_path / "run.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_jsonl(store, RUN, out)
    whole = whole_log_source(path)
    streamed = open_exported(path)
    assert streamed.run == whole.run
    assert streamed.records == whole.records
    rows = list(streamed.events(None))
    assert rows == list(whole.events(None))
    assert [type(row[5]) for row in rows] == [type(row[5]) for row in whole.events(None)]
    assert rows[4][5].ended_ns == 2**63 - 1 and rows[3][5].text == "Grün ✓"
    assert list(streamed.events("s2")) == list(whole.events("s2")) == rows[6:]


def test_the_event_line_model_is_the_documented_one() -> None:
    assert EventLine.__struct_fields__ == tuple(EVENT_FIELDS)


def test_an_export_without_events_scores_every_record_as_not_run(
    store: Store, tmp_path: Path
) -> None:
    path, lines = mixed_export(store, tmp_path)
    header = [line for line in lines if json.loads(line)["type"] not in ("event", "end")]
    end = {"type": "end", "runs": 1, "sessions": 5, "events": 0}
    scores = score_exported(write(tmp_path / "header.jsonl", [*header, json.dumps(end)]))
    assert (scores.events_scored, scores.records_scored, scores.sessions.not_run) == (0, 5, 5)


# --- the order of the events -----------------------------------------------------------------


def test_sessions_in_any_order_score_alike(store: Store, tmp_path: Path) -> None:
    """Only each session's events together is needed: the sessions' order is free."""
    path, lines = mixed_export(store, tmp_path)
    sessions = event_lines(lines)
    first = min(p for positions in sessions.values() for p in positions)
    reordered = [
        *lines[:first],
        *(lines[p] for s in reversed(sessions) for p in sessions[s]),
        lines[-1],  # the end line
    ]
    assert reordered != lines
    moved = write(tmp_path / "reordered.jsonl", reordered)
    assert score_exported(moved).to_json(include_records=True) == score_exported(path).to_json(
        include_records=True
    )


def test_a_session_whose_events_resume_later_fails_on_that_line(
    store: Store, tmp_path: Path
) -> None:
    path, lines = mixed_export(store, tmp_path)
    sessions = event_lines(lines)
    names = list(sessions)
    # The first event of the second session, moved after the third session's events.
    moved = sessions[names[1]][0]
    out = lines[:]
    line = out.pop(moved)
    out.insert(sessions[names[2]][-1], line)
    bad = write(tmp_path / "interleaved.jsonl", out)
    number = sessions[names[2]][-1] + 1  # the moved line's 1-based number
    with pytest.raises(ScoreError) as info:
        score_exported(bad)
    assert str(info.value) == (
        f"{bad}: line {number}: events of session {names[1]!r} resume after those of "
        f"session {names[2]!r}; {ORDER_RULE}"
    )
    result = runner.invoke(app, ["score", "--events", str(bad)])
    assert result.exit_code == 2
    assert f"line {number}: events of session {names[1]!r} resume" in " ".join(
        result.output.split()
    )
    assert "Traceback" not in result.output


def test_events_out_of_seq_order_fail_on_that_line(store: Store, tmp_path: Path) -> None:
    path, lines = mixed_export(store, tmp_path)
    positions = event_lines(lines)["qa-1"]
    out = lines[:]
    a, b = positions[3], positions[4]
    out[a], out[b] = out[b], out[a]
    bad = write(tmp_path / "swapped.jsonl", out)
    with pytest.raises(ScoreError) as info:
        score_exported(bad)
    assert str(info.value) == (
        f"{bad}: line {b + 1}: event seq 3 of session 'qa-1' follows seq 4; each session's "
        "events must be in rising seq order, as `streameval export` writes them"
    )


# --- malformed lines -------------------------------------------------------------------------

MIDDLE = 100  # a line among the events of the mixed run (its 1-based number)


def change_payload(obj: dict, **fields) -> None:
    obj["payload"].update(fields)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ('{"type": "event", "seq": 1', "not valid JSON (Expecting ',' delimiter at column 27)"),
        ("", "not valid JSON (Expecting value at column 1)"),
        ("[1, 2]", "expected a JSON object"),
        (lambda o: o.update(video_t=float("nan")), "not valid JSON (NaN is not a JSON number)"),
        (lambda o: o.pop("runtime_ns"), "event line lacks field(s) runtime_ns"),
        (lambda o: o.update(seq="1"), "field 'seq' must be int, got '1'"),
        (lambda o: o.update(seq=True), "field 'seq' must be int, got True"),
        (
            lambda o: o.update(video_t="1.0"),
            "field 'video_t' must be int or float or null, got '1.0'",
        ),
        (lambda o: o.update(extra=1), "event line has unknown field(s) extra"),
        (lambda o: o.update(type="frame"), "unknown line type 'frame'"),
        (lambda o: o.update(type="record"), "a record line cannot follow event lines"),
        (lambda o: o.update(kind="frame_lost"), "unknown event kind 'frame_lost'"),
        (
            lambda o: o["payload"].update(index="x"),
            "frame_sent payload, field 'index': Input should be a valid integer, got 'x'",
        ),
        (lambda o: o["payload"].pop("width"), "frame_sent payload lacks field 'width'"),
    ],
)
def test_a_malformed_line_mid_file_is_named_with_its_number(
    store: Store, tmp_path: Path, change, problem: str
) -> None:
    path, lines = mixed_export(store, tmp_path)
    assert json.loads(lines[MIDDLE - 1])["kind"] == "frame_sent"
    bad = write(tmp_path / "bad.jsonl", corrupt(lines, MIDDLE, change))
    with pytest.raises(ScoreError) as info:
        score_exported(bad)
    assert str(info.value) == f"{bad}: line {MIDDLE}: {problem}"


def test_a_line_that_is_not_utf8_is_named(store: Store, tmp_path: Path) -> None:
    path, lines = mixed_export(store, tmp_path)
    data = "\n".join(lines).encode().split(b"\n")
    data[MIDDLE - 1] = b'{"type": "ev\xffent"}'
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join(data) + b"\n")
    with pytest.raises(ScoreError) as info:
        read_all(bad)
    assert str(info.value) == f"{bad}: line {MIDDLE}: not valid UTF-8 (byte 13)"


def test_the_cli_prints_one_line_for_a_malformed_line(store: Store, tmp_path: Path) -> None:
    path, lines = mixed_export(store, tmp_path)
    bad = write(tmp_path / "bad.jsonl", [*lines[: MIDDLE - 1], "[1, 2]", *lines[MIDDLE:]])
    result = runner.invoke(app, ["score", "--events", str(bad)])
    assert result.exit_code == 2
    assert f"line {MIDDLE}: expected a JSON object" in " ".join(result.output.split())
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("number", "change", "problem"),
    [
        (1, lambda o: o.update(schema="streameval-events/2"), "unsupported schema"),
        (1, lambda o: o.update(type="record"), "the first line must be the run line, not 'record'"),
        (2, lambda o: o.pop("video_path"), "record line lacks field(s) video_path"),
        (4, lambda o: o.update(attempt=None), "field 'attempt' must be int, got None"),
        (4, lambda o: o.update(type="run"), "a run line cannot follow record lines"),
    ],
)
def test_a_malformed_header_line_fails_when_the_export_is_opened(
    store: Store, tmp_path: Path, number: int, change, problem: str
) -> None:
    filled_store(store)
    path = tmp_path / "run.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_jsonl(store, RUN, out)
    lines = path.read_text(encoding="utf-8").splitlines()
    obj = json.loads(lines[number - 1])
    change(obj)
    lines[number - 1] = json.dumps(obj)
    bad = write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(ScoreError, match=re.escape(f"{bad}: line {number}: {problem}")):
        open_exported(bad)


def test_header_lines_in_their_order(store: Store, tmp_path: Path) -> None:
    filled_store(store)
    path = tmp_path / "run.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_jsonl(store, RUN, out)
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = write(tmp_path / "bad.jsonl", [lines[0], lines[0]])
    with pytest.raises(ScoreError, match=f"^{bad}: line 2: a second run line$"):
        open_exported(bad)
    write(bad, [lines[0], lines[3], lines[1]])
    with pytest.raises(ScoreError, match=f"^{bad}: line 3: a record line cannot follow session"):
        open_exported(bad)


def test_an_empty_or_missing_export(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ScoreError, match=f"^{empty}: empty file, expected a run line$"):
        open_exported(empty)
    with pytest.raises(ScoreError, match="does not exist"):
        open_exported(tmp_path / "none.jsonl")
    with pytest.raises(ScoreError, match="is a directory"):
        open_exported(tmp_path)


# --- one event at a time ---------------------------------------------------------------------


# Event payload models, the adapter's hello aside: a session's trace keeps its own.
COUNTED = frozenset(PAYLOAD_MODELS.values()) - {AdapterHelloPayload}


def live_payloads() -> int:
    """The events' payloads alive now (the garbage collector tracks every model). Garbage
    that a collection has not reached yet (an earlier test's, in cycles) is not alive: it
    is collected first, or it would count in the baseline and vanish later."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) in COUNTED)


def watched(rows: Iterator[EventRow], peaks: list[int]) -> Iterator[EventRow]:
    """The rows, counting the live payloads at every 25th (and the most seen)."""
    for position, row in enumerate(rows):
        if position % 25 == 0:
            peaks.append(live_payloads())
        yield row


def test_the_reader_holds_one_event_at_a_time(store: Store, tmp_path: Path) -> None:
    path, lines = mixed_export(store, tmp_path)
    events = sum(1 for line in lines if '"type":"event"' in line)
    assert events > 150
    baseline = live_payloads()
    streamed: list[int] = []
    for _ in watched(open_exported(path).events(None), streamed):
        pass
    assert max(streamed) - baseline <= 2
    # The same count sees the whole log (but for the five hellos) when it is read first.
    whole: list[int] = []
    for _ in watched(iter(whole_log_source(path).events(None)), whole):
        pass
    assert min(whole) - baseline == events - len(event_lines(lines)) == events - 5


def test_scoring_a_streamed_export_holds_no_event(store: Store, tmp_path: Path) -> None:
    """Each session's trace keeps numbers, not events: no payload outlives its row."""
    path, _ = mixed_export(store, tmp_path)
    source = open_exported(path)
    read = source.events
    peaks: list[int] = []
    baseline = live_payloads()
    source.events = lambda session_id=None: watched(read(session_id), peaks)
    scores = scores_of(evaluate_source(source))
    assert scores.events_scored > 150 and len(peaks) > 6
    assert max(peaks) - baseline <= 2


def alive(kind: type) -> list:
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is kind]


@pytest.mark.parametrize("via", ["export", "store"])
def test_each_record_is_evaluated_once_its_session_is_read_and_its_trace_dropped(
    store: Store, tmp_path: Path, via: str
) -> None:
    """When a session's first event is read, the records of the sessions before the last
    one are evaluated, and no trace but the last two sessions' is alive: the one being
    assembled and the one just evaluated (the evaluator's loop still names it). Keeping
    every trace to the end would hold all the sessions read so far."""
    path, _ = mixed_export(store, tmp_path)
    source = open_exported(path) if via == "export" else store_source(store, "run-a")
    read = source.events
    seen: list[tuple[str, set[str], list[tuple[str, bool]]]] = []

    def observed(session_id: str | None = None) -> Iterator[EventRow]:
        previous = None
        for row in read(session_id):
            if row[0] != previous:
                traces = {trace.session_id for trace in alive(SessionTrace)}
                evaluations = [
                    (e.record.record_id, e.held is None) for e in alive(RecordEvaluation)
                ]
                seen.append((row[0], traces, sorted(evaluations)))
                previous = row[0]
            yield row

    source.events = observed
    run = evaluate_source(source)
    sessions = [session for session, _, _ in seen]
    assert len(sessions) == 5 and sessions == sorted(sessions)
    for k, (_, traces, evaluations) in enumerate(seen):
        assert traces <= set(sessions[max(0, k - 2) : k]), k
        assert evaluations == [(session, True) for session in sessions[: max(0, k - 1)]], k
    assert all(e.held is None for e in run.evaluations)
    assert [e.session.events for e in run.evaluations] == [
        sum(1 for line in path.read_text().splitlines() if f'"session_id":"{s}","seq"' in line)
        for s in sessions
    ]
    with pytest.raises(TraceDropped, match=f"^record '{sessions[0]}': its trace was dropped$"):
        _ = run.evaluations[0].trace


def test_one_sessions_events_stop_being_read_after_it(store: Store, tmp_path: Path) -> None:
    path, lines = mixed_export(store, tmp_path)
    sessions = event_lines(lines)
    # qa-1 follows qa-0: its first line ends qa-0's, its second is never read for qa-0.
    after = sessions["qa-1"][1]
    bad = write(tmp_path / "bad.jsonl", [*lines[:after], "[1, 2]", *lines[after + 1 :]])
    rows = list(open_exported(bad).events("qa-0"))
    assert [row[1] for row in rows] == list(range(len(sessions["qa-0"])))
    with pytest.raises(ScoreError, match=f"line {after + 1}: expected a JSON object"):
        read_all(bad)


def test_an_older_cores_payload_is_upgraded(store: Store, tmp_path: Path) -> None:
    path, lines = mixed_export(store, tmp_path)
    out = []
    for line in lines:
        obj = json.loads(line)
        if obj.get("kind") == "adapter_hello":
            del obj["payload"]["gpu"]
            line = json.dumps(obj)
        out.append(line)
    assert out != lines
    older = write(tmp_path / "older.jsonl", out)
    assert score_exported(older).to_json(include_records=True) == score_exported(path).to_json(
        include_records=True
    )

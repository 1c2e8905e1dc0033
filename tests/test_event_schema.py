"""The typed event contract (streameval.events): one model per kind, validated on creation,
round-tripped by the store and the export, and documented from the models themselves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from streameval.core.store.export import ExportFormatError, export_jsonl, read_jsonl
from streameval.core.store.store import Store, StoreError
from streameval.events import (
    PAYLOAD_MODELS,
    SCHEMA_FILE,
    AudioSessionConditions,
    DeclaredConditions,
    Event,
    EventKind,
    FailureCause,
    PayloadError,
    SessionConditions,
    SessionFailedPayload,
    WorkloadPayload,
    json_schema_text,
    read_payload,
    validate_payload,
    with_markdown,
)
from streameval.protocol import AdapterConditions, AudioConditions, RunConditions, Workload
from tests.event_examples import EXAMPLES, example, example_events
from tests.test_store import RUN, new_run

DOCS = Path(__file__).resolve().parents[1] / "docs"

KINDS_WITH_FIELDS = [kind for kind in EventKind if EXAMPLES[kind]]


# --------------------------------------------------------------------------- the models


def test_every_kind_has_a_strict_frozen_model() -> None:
    assert set(PAYLOAD_MODELS) == set(EventKind) == set(EXAMPLES)
    for kind, model in PAYLOAD_MODELS.items():
        config = model.model_config
        assert (config["extra"], config["frozen"], config["strict"]) == ("forbid", True, True)
        assert all(field.is_required() for field in model.model_fields.values()), kind
        payload = validate_payload(kind, example(kind))
        assert type(payload) is model
        # Dumped as the Core recorded it: same fields, same order, same JSON values.
        assert json.dumps(payload.model_dump(mode="json")) == json.dumps(EXAMPLES[kind])


def test_an_event_holds_its_kind_and_typed_payload() -> None:
    event = Event(RUN, "s1", 0, "frame_sent", 7, 0.5, example(EventKind.FRAME_SENT))
    assert event.kind is EventKind.FRAME_SENT
    assert (event.payload.t, event.payload.scheduled_ns, event.payload.bytes) == (0.5, None, 5120)
    failed = Event(
        RUN, "s1", 1, EventKind.SESSION_FAILED, 8, None, example(EventKind.SESSION_FAILED)
    )
    assert failed.payload.cause is FailureCause.INPUT
    with pytest.raises(ValidationError, match="frozen"):
        failed.payload.stage = "connect"  # type: ignore[misc]


@pytest.mark.parametrize("kind", KINDS_WITH_FIELDS)
def test_a_missing_field_fails_when_the_event_is_created(kind: EventKind) -> None:
    payload = example(kind)
    name = next(reversed(payload))
    del payload[name]
    with pytest.raises(PayloadError, match=f"^{kind} payload lacks field '{name}'$") as info:
        Event(RUN, "s1", 0, kind, 1, None, payload)
    assert (info.value.kind, info.value.field) == (kind, name)


@pytest.mark.parametrize("kind", KINDS_WITH_FIELDS)
def test_a_renamed_field_fails_when_the_event_is_created(kind: EventKind) -> None:
    payload = example(kind)
    name = next(iter(payload))
    payload[name + "_renamed"] = payload.pop(name)
    with pytest.raises(PayloadError, match=f"^{kind} payload lacks field '{name}'"):
        Event(RUN, "s1", 0, kind, 1, None, payload)


@pytest.mark.parametrize("kind", list(EventKind))
def test_an_unknown_field_fails_when_the_event_is_created(kind: EventKind) -> None:
    payload = {**example(kind), "surprise": 1}
    with pytest.raises(PayloadError, match=f"^{kind} payload has unknown field 'surprise'$"):
        Event(RUN, "s1", 0, kind, 1, None, payload)


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        (EventKind.FRAME_SENT, {"index": "0"}, "field 'index': Input should be a valid integer"),
        (EventKind.FRAME_SENT, {"index": True}, "field 'index': Input should be a valid integer"),
        (EventKind.FRAME_SENT, {"t": None}, "field 't': Input should be a valid number"),
        (EventKind.FRAME_SENT, {"t": float("nan")}, "field 't': Input should be a finite number"),
        (EventKind.QUESTION_SENT, {"options": ("A", "B")}, "field 'options'"),
        (EventKind.SESSION_START, {"conditions": {}}, "lacks field 'conditions.profile'"),
        (EventKind.WORKLOAD, {"kind": "nap"}, "field 'kind': Input should be 'model_call'"),
        (EventKind.SESSION_FAILED, {"cause": "gremlins"}, "field 'cause': Input should be"),
        (EventKind.SESSION_FAILED, {"stage": "lunch"}, "field 'stage': Input should be"),
    ],
)
def test_a_mistyped_field_fails_when_the_event_is_created(kind, change, message) -> None:
    with pytest.raises(PayloadError, match=re.escape(message)):
        Event(RUN, "s1", 0, kind, 1, None, {**example(kind), **change})


def test_an_unknown_kind_or_another_kinds_model_fails() -> None:
    with pytest.raises(PayloadError, match="unknown event kind 'frame_lost'"):
        Event(RUN, "s1", 0, "frame_lost", 1, None, {})
    ack = validate_payload(EventKind.FRAME_ACK, {"index": 0})
    with pytest.raises(PayloadError, match="must be FrameSentPayload, not FrameAckPayload"):
        Event(RUN, "s1", 0, EventKind.FRAME_SENT, 1, None, ack)


def test_a_session_failed_payload_of_an_older_core_reads_with_its_derived_cause() -> None:
    old = {"stage": "handshake", "reason": "declared conditions: needs state"}
    with pytest.raises(PayloadError, match="lacks field 'cause'"):  # never written so today
        validate_payload(EventKind.SESSION_FAILED, old)
    for data in (old, json.dumps(old)):
        payload = read_payload("session_failed", data)
        assert payload == SessionFailedPayload(
            stage="handshake", reason=old["reason"], cause="adapter"
        )


def test_an_adapter_hello_of_an_older_core_reads_with_no_gpu() -> None:
    old = {key: value for key, value in example(EventKind.ADAPTER_HELLO).items() if key != "gpu"}
    with pytest.raises(PayloadError, match="lacks field 'gpu'"):  # never written so today
        validate_payload(EventKind.ADAPTER_HELLO, old)
    for data in (old, json.dumps(old)):
        payload = read_payload("adapter_hello", data)
        assert (payload.adapter, payload.gpu) == ("reference", None)


def test_an_adapter_hello_from_before_declared_settings_reads_with_none_declared() -> None:
    new = example(EventKind.ADAPTER_HELLO)
    conditions = {key: value for key, value in new["conditions"].items() if key != "settings"}
    old = {key: value for key, value in new.items() if key != "gpu"} | {"conditions": conditions}
    with pytest.raises(PayloadError, match="settings"):  # never written so today
        validate_payload(EventKind.ADAPTER_HELLO, old)
    for data in (old, json.dumps(old)):
        payload = read_payload("adapter_hello", data)
        assert (payload.gpu, payload.conditions.settings) == (None, {})
        assert payload.conditions.model_dump(exclude={"settings"}) == conditions


def test_declared_settings_keep_their_json_types() -> None:
    hello = example(EventKind.ADAPTER_HELLO)
    settings = {"cache_policy": "evict-oldest", "cache_max_tokens": 4096, "fps": 2.0, "on": True}
    data = hello | {"conditions": hello["conditions"] | {"settings": settings}}
    payload = read_payload("adapter_hello", json.dumps(data))
    assert payload.conditions.settings == settings
    assert [type(v) for v in payload.conditions.settings.values()] == [str, int, float, bool]


def test_the_mirrored_conditions_and_workload_match_the_wire_protocol() -> None:
    """The payloads copy the protocol's messages field by field: a field the protocol gains
    must be added to the payload model too (and to docs/events.md, regenerated)."""
    pairs: list[tuple[type[BaseModel], type[BaseModel], set[str]]] = [
        (SessionConditions, RunConditions, set()),
        (AudioSessionConditions, AudioConditions, set()),
        (DeclaredConditions, AdapterConditions, set()),
        (WorkloadPayload, Workload, {"type"}),
    ]
    for ours, theirs, skipped in pairs:
        wire = {name: f for name, f in theirs.model_fields.items() if name not in skipped}
        assert list(ours.model_fields) == list(wire), ours.__name__
        for name in ours.model_fields:
            assert _schema_of(ours, name) == _schema_of(theirs, name), (ours.__name__, name)


def _schema_of(model: type[BaseModel], name: str) -> Any:
    """A field's JSON Schema without what may differ (title, default, alias names)."""
    schema = model.model_json_schema()
    field = dict(schema["properties"][name])
    # The wire's bounds are checked where it is parsed; a recorded value has passed them.
    for key in ("title", "default", "minimum", "maximum", "exclusiveMinimum"):
        field.pop(key, None)
    if "$ref" in field:  # a named closed set: compare its values
        field = schema["$defs"][field.pop("$ref").rsplit("/", 1)[1]]
    if "anyOf" in field:  # an optional nested model, compared as its own pair
        field["anyOf"] = ["model" if "$ref" in part else part for part in field["anyOf"]]
    return field


# --------------------------------------------------------------------------- store and export


def test_the_store_round_trips_typed_events(store: Store) -> None:
    new_run(store)
    events = example_events(RUN, "s1")
    store.append_events(events)
    stored = list(store.iter_events(RUN))
    assert stored == events
    assert [type(ev.payload) for ev in stored] == list(PAYLOAD_MODELS.values())
    assert all(type(ev.runtime_ns) is int for ev in stored)
    workload = next(ev for ev in stored if ev.kind == EventKind.WORKLOAD)
    assert workload.payload.ended_ns == 2**63 - 1  # beyond a float's precision


def test_the_store_names_a_stored_payload_that_no_longer_matches(store: Store) -> None:
    new_run(store)
    store.append_events(example_events(RUN, "s1")[:3])
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE events SET payload = '{\"index\": 0}' WHERE session_id = 's1' AND seq = 1"
        )
    with pytest.raises(StoreError, match="session 's1' event 1: frame_sent payload lacks field"):
        list(store.iter_events(RUN))


def exported_lines(store: Store, tmp_path: Path) -> list[str]:
    new_run(store)
    store.append_events(example_events(RUN, "s1"))
    path = tmp_path / "run.jsonl"
    with path.open("w", encoding="utf-8") as out:
        export_jsonl(store, RUN, out)
    return path.read_text(encoding="utf-8").splitlines()


def test_the_export_writes_payloads_as_recorded_and_reads_them_typed(
    store: Store, tmp_path: Path
) -> None:
    lines = exported_lines(store, tmp_path)
    events = [json.loads(line) for line in lines if '"type":"event"' in line]
    assert [line["payload"] for line in events] == list(EXAMPLES.values())
    exported = read_jsonl(tmp_path / "run.jsonl")
    assert exported.events == example_events(RUN, "s1")


def test_an_export_with_a_corrupted_payload_field_is_refused_in_one_line(
    store: Store, tmp_path: Path
) -> None:
    lines = exported_lines(store, tmp_path)
    number = next(i for i, line in enumerate(lines, 1) if '"kind":"response_final"' in line)
    line = json.loads(lines[number - 1])
    line["payload"]["output_token"] = line["payload"].pop("output_tokens")
    lines[number - 1] = json.dumps(line)
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ExportFormatError) as info:
        read_jsonl(path)
    assert str(info.value) == (
        f"{path}: line {number}: response_final payload lacks field 'output_tokens' "
        "(and 1 more problem)"
    )


# --------------------------------------------------------------------------- documentation


def test_the_docs_payload_tables_are_generated_from_the_models() -> None:
    document = (DOCS / "events.md").read_text(encoding="utf-8")
    assert with_markdown(document) == document, (
        "docs/events.md is out of date: run python -m streameval.events --write docs"
    )


def test_the_json_schema_file_is_generated_from_the_models() -> None:
    assert (DOCS / SCHEMA_FILE).read_text(encoding="utf-8") == json_schema_text(), (
        f"docs/{SCHEMA_FILE} is out of date: run python -m streameval.events --write docs"
    )

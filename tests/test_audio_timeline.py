"""The record timeline's audio (issue 37) through the results API over a real SQLite store:
every chunk the Core sent, silent ones marked, with when it went out, and the sound events
the benchmark record's metadata names (the synthetic benchmark's tones); a video-only record
has neither."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from streameval.core.benchmark.records import QARecord
from streameval.core.store.store import Store
from streameval.scorer.eventlog import SessionLog, store_run
from streameval.scorer.service.api import create_app

# The synthetic benchmark's ground truth for a video with sound (its records' metadata).
TONES = [{"onset_s": 0.5, "end_s": 1.0, "hz": 1000}, {"onset_s": 1.5, "end_s": 2.5, "hz": 400}]


def heard_record(record_id: str = "beeps", tones: list | None = TONES) -> QARecord:
    metadata = {} if tones is None else {"video": {"audio": {"sample_rate": 16000, "tones": tones}}}
    return QARecord(
        record_id=record_id,
        source_id=f"v-{record_id}",
        source_benchmark="handwritten",
        task_type="SOUND",
        video_path=f"{record_id}.mp4",
        question="How many beeps?",
        options=("A. one", "B. two"),
        answer="B",
        question_time_s=3.0,
        evidence_anchor_s=0.5,
        metadata=metadata,
    )


def heard_log(record_id: str = "beeps", chunks: int = 6, silent_from: int = 4) -> SessionLog:
    """Frames at 0, 1, 2 s; chunks 0..5 (0..3 s) in stream order, from `silent_from` on
    silent; the question at 3 s answered "B". One event a millisecond from 1.001 s."""
    log = SessionLog("run-a", record_id).start(audio=True)
    for k in range(chunks):
        if k % 2 == 0:
            log.frame(k / 2)
        log.audio(k, silent=k >= silent_from)
    log.question(heard_record(record_id))
    log.respond("B")
    log.finish()
    return log


def store_heard_run(store: Store) -> None:
    """run-a: `beeps` (sound, tones named), `plain` (sound, no tones), `mute` (no sound)."""
    mute = SessionLog("run-a", "mute").start()
    mute.frame(0.0)
    mute.question(heard_record("mute", tones=None))
    mute.respond("B")
    mute.finish()
    records = [heard_record(), heard_record("plain", tones=None), heard_record("mute", tones=None)]
    store_run(store, "run-a", records, [heard_log(), heard_log("plain", 2, 9), mute])


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with Store(url) as store:
        store_heard_run(store)
    with TestClient(create_app(url)) as test_client:
        yield test_client


def test_the_timeline_lists_every_chunk_and_the_records_sound_events(client: TestClient):
    timeline = client.get("/runs/run-a/records/beeps/timeline").json()
    chunks = [
        (a["index"], a["start_t"], a["t"], a["at_s"], a["lag_ms"], a["silent"])
        for a in timeline["audio"]
    ]
    # Sent at 1.004, 1.006, 1.009, 1.011, 1.014, 1.016 s; the first event is at 1.001 s.
    assert chunks == [
        (0, 0.0, 0.5, 0.003, None, False),
        (1, 0.5, 1.0, 0.005, None, False),
        (2, 1.0, 1.5, 0.008, None, False),
        (3, 1.5, 2.0, 0.010, None, False),
        (4, 2.0, 2.5, 0.013, None, True),
        (5, 2.5, 3.0, 0.015, None, True),
    ]
    assert timeline["sound_events"] == [
        {"start_s": 0.5, "end_s": 1.0, "label": "1000 Hz tone"},
        {"start_s": 1.5, "end_s": 2.5, "label": "400 Hz tone"},
    ]
    assert [f["t"] for f in timeline["frames"]] == [0.0, 1.0, 2.0]
    plain = client.get("/runs/run-a/records/plain/timeline").json()
    assert [(a["index"], a["silent"]) for a in plain["audio"]] == [(0, False), (1, False)]
    assert plain["sound_events"] == []
    mute = client.get("/runs/run-a/records/mute/timeline").json()
    assert (mute["audio"], mute["sound_events"]) == ([], [])
    assert [f["t"] for f in mute["frames"]] == [0.0]

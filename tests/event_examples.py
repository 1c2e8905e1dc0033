"""One valid payload of every event kind, as the Core records it, for the store, export and
schema tests (tests/test_event_schema.py, tests/test_store.py, tests/test_export.py)."""

from __future__ import annotations

import json
from typing import Any

from streameval.events import Event, EventKind

# One payload of every kind, as the Core records it (values of the right JSON types).
EXAMPLES: dict[EventKind, dict[str, Any]] = {
    EventKind.SESSION_START: {
        "endpoint": "ws://127.0.0.1:8765/ws",
        "conditions": {
            "profile": "trace",
            "pacing": "logical",
            "speed": 1.0,
            "fps": 2.0,
            "max_width": 960,
            "jpeg_quality": 90,
            "qa_history_s": 10.0,
            "proactive_lead_s": 5.0,
            "audio": {
                "sample_rate": 16000,
                "channels": 1,
                "encoding": "pcm_s16le",
                "chunk_s": 0.5,
            },
        },
        "record_ids": ["qa-1"],
    },
    EventKind.FRAME_SENT: {
        "index": 0,
        "frame_id": "v1:f0",
        "t": 0.5,
        "source_t": None,
        "scheduled_ns": None,
        "lag_ns": None,
        "bytes": 5120,
        "width": 320,
        "height": 240,
    },
    EventKind.FRAME_DROPPED: {
        "index": 1,
        "frame_id": "v1:f1",
        "t": 1.0,
        "scheduled_ns": 2**62,
        "lag_ns": 1_500_000,
    },
    EventKind.AUDIO_SENT: {
        "index": 3,
        "start_t": 1.5,
        "t": 2.0,
        "sample_rate": 16000,
        "samples": 8000,
        "bytes": 16000,
        "silent": False,
        "scheduled_ns": None,
        "lag_ns": None,
    },
    EventKind.QUESTION_SENT: {
        "task_id": "qa-1",
        "record_id": "qa-1",
        "t": 12.5,
        "text": "How many?",
        "options": ["A. 1", "B. 2"],
    },
    EventKind.INSTRUCTION_SENT: {
        "task_id": "pro-1",
        "record_id": "pro-1",
        "t": 0.0,
        "text": "Tell me when it turns green.",
    },
    EventKind.STEP_SENT: {"task_id": "pro-1", "step": 3, "t": 1.5},
    EventKind.SESSION_END: {"reason": "complete"},
    EventKind.CONNECTION_CUT: {"t": 4.0, "last_frame_index": 4, "open_response": None},
    EventKind.SESSION_RESUMED: {"supported": True, "resumed": True, "reconnect_ns": 2_500_000},
    EventKind.ADAPTER_HELLO: {
        "adapter": "reference",
        "adapter_version": "1",
        "protocol": "streameval/1",
        "conditions": {
            "state": "native",
            "initiation": "polled",
            "boundary": "model+adapter",
            "deployment": "in-process",
            "model_name": "reference",
            "model_version": "",
            "history": "",
            "settings": {},
        },
        "gpu": "NVIDIA H200 GPU-5f0c2b1e",
        "audio": True,
    },
    EventKind.FRAME_ACK: {"index": 0},
    EventKind.AUDIO_ACK: {"index": 3},
    EventKind.RESPONSE_START: {"response_id": "r1", "task_id": "qa-1"},
    EventKind.RESPONSE_DELTA: {"response_id": "r1", "seq": 0, "text": "Grün ✓", "snapshot": False},
    EventKind.RESPONSE_FINAL: {
        "response_id": "r1",
        "text": "Grün ✓",
        "output_tokens": 3,
        "input_tokens": None,
    },
    EventKind.SILENT: {"task_id": "pro-1", "step": None},
    EventKind.WORKLOAD: {
        "kind": "model_call",
        "frame_ids": ["v1:f0"],
        "images": 1,
        "pixels": None,
        "replayed_frames": None,
        "prefix_shared_images": None,
        "audio_seconds": 2.5,
        "audio_tokens": 63,
        "input_tokens": 850,
        "output_tokens": None,
        "started_ns": 2**62 + 1,
        "ended_ns": 2**63 - 1,
    },
    EventKind.ADAPTER_ERROR: {"code": "oom", "message": "out of memory", "fatal": True},
    EventKind.SESSION_FAILED: {"stage": "frames", "reason": "cannot decode", "cause": "input"},
    EventKind.SESSION_FINISHED: {},
}


def example(kind: EventKind) -> dict[str, Any]:
    """A fresh copy of the example payload of `kind` (tests change theirs)."""
    return json.loads(json.dumps(EXAMPLES[kind]))


def example_events(run_id: str, session_id: str) -> list[Event]:
    """One event of every kind, runtimes beyond 2**53, every other video time null."""
    return [
        Event(run_id, session_id, seq, kind, 2**62 + seq, None if seq % 2 else seq / 3, payload)
        for seq, (kind, payload) in enumerate(EXAMPLES.items())
    ]

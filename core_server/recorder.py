"""Numbering a session's events, in the order the Core observed them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streameval.events import Event, EventKind


class Recorder:
    """Numbers a session's events and hands them to the run's single writer."""

    def __init__(self, run_id: str, session_id: str, sink: Callable[[Event], None]) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self.sink = sink
        self.seq = 0

    def record(
        self, kind: EventKind, runtime_ns: int, video_t: float | None, /, **payload: Any
    ) -> None:
        # Positional-only, so that a payload may itself have a field named `kind`.
        self.sink(Event(self.run_id, self.session_id, self.seq, kind, runtime_ns, video_t, payload))
        self.seq += 1

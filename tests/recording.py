"""Test helpers that record what a process under test does: the messages an adapter hook
sends (`Wire`, in place of the Core), the events a session's `Recorder` makes
(`reading_into`) and a value over time (`Sampler`; a process's memory: `RssSampler`)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Generic, Self, TypeVar

from streameval.core.store.store import EventRow
from streameval.events import Event, read_payload

T = TypeVar("T")


def reading_into(events: list[Event]) -> Callable[[EventRow], None]:
    """A `Recorder` sink that appends each row's event, its payload read back from the
    row's JSON as the store reads it."""

    def sink(row: EventRow) -> None:
        run_id, session_id, seq, kind, runtime_ns, video_t, payload = row
        payload_read = read_payload(kind, payload)
        events.append(Event(run_id, session_id, seq, kind, runtime_ns, video_t, payload_read))

    return sink


class Wire:
    """Collects what an adapter sends, as the Core would receive it."""

    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def send(self, text: str) -> None:
        self.messages.append(json.loads(text))

    def of(self, kind: str) -> list[dict]:
        return [m for m in self.messages if m["type"] == kind]

    def workloads(self, kind: str) -> list[dict]:
        return [m for m in self.of("workload") if m["kind"] == kind]


class Sampler(Generic[T]):
    """`read()` every `interval_s` in a thread, with the monotonic time (ns) it was read."""

    def __init__(self, read: Callable[[], T], interval_s: float) -> None:
        self.read = read
        self.interval_s = interval_s
        self.samples: list[tuple[int, T]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic_ns(), self.read()))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class RssSampler(Sampler[int]):
    """A process's resident memory every `interval_s`."""

    def __init__(self, pid: int, interval_s: float = 0.05) -> None:
        import psutil  # here: the GPU check imports this module with the model stack only

        process = psutil.Process(pid)
        super().__init__(lambda: process.memory_info().rss, interval_s)

    def after(self, fraction: float) -> list[int]:
        """The samples from `fraction` of the sampled span on (after warm-up)."""
        first, last = self.samples[0][0], self.samples[-1][0]
        return [rss for t, rss in self.samples if t >= first + (last - first) * fraction]

"""Progress of a run's long steps, as phases a user can follow.

```python
progress.start(Phase.FRAMES, 7)                    # 7 videos to prepare
progress.item(Phase.FRAMES, "videos/long.mp4", 120.0, 3600.0)  # seconds decoded so far
progress.advance(Phase.FRAMES, 1)                  # 1 of the 7 done
progress.finish(Phase.FRAMES)
progress.cached(Phase.BENCHMARK, 7)                # nothing to do: all 7 were ready
```

The Core's library code (the synthetic generator, the runner) reports through `Progress`;
`streameval run` and `streameval demo` show it on stderr (core_server/cli/progress_display.py);
everyone else gets `NO_PROGRESS`. Every call comes from the thread that runs the event loop
(or, outside one, the caller's thread). Nothing here imports rich.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class Phase(StrEnum):
    """The phases of `streameval run` (and `demo`, which scores afterwards), in order; the
    value is what a user reads."""

    BENCHMARK = "generating synthetic benchmark"  # videos written
    FRAMES = "preparing frames"  # videos whose frames are extracted into the frame cache
    SESSIONS = "streaming sessions"  # sessions ended (finished or failed)
    SCORING = "scoring"  # no count: one step


# What a phase counts.
UNITS: dict[Phase, str] = {
    Phase.BENCHMARK: "videos",
    Phase.FRAMES: "videos",
    Phase.SESSIONS: "sessions",
    Phase.SCORING: "",
}


class Progress(Protocol):
    def start(self, phase: Phase, total: int | None) -> None:
        """The phase begins, with `total` items to do (None: one step, not counted)."""

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        """`done` items of the phase are done so far, `failed` of them failed."""

    def item(self, phase: Phase, name: str, done_s: float, total_s: float) -> None:
        """How far one long item is: `done_s` of its `total_s` seconds of video decoded;
        `done_s == total_s` ends the item."""

    def finish(self, phase: Phase) -> None:
        """The phase is complete."""

    def cached(self, phase: Phase, total: int) -> None:
        """The phase had nothing to do: its `total` items were ready from an earlier run."""

    def warn(self, message: str) -> None:
        """A line worth reading whatever the display (a session that failed)."""


class NoProgress:
    """Shows nothing: the default of library code, tests and services."""

    def start(self, phase: Phase, total: int | None) -> None:
        pass

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        pass

    def item(self, phase: Phase, name: str, done_s: float, total_s: float) -> None:
        pass

    def finish(self, phase: Phase) -> None:
        pass

    def cached(self, phase: Phase, total: int) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


NO_PROGRESS: Progress = NoProgress()

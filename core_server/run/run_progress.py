"""A run's phases as `progress` (streameval/progress.py) shows them: Phase.FRAMES, a bar only
once a video needs extracting, and Phase.SESSIONS, each session's outcome counted into the
run's summary (a failed one warned of)."""

from __future__ import annotations

from dataclasses import dataclass

from streameval.core.run.run_end import RunSummary
from streameval.core.run.worker import WorkerSummary
from streameval.core.session.driver import SessionOutcome
from streameval.progress import Phase, Progress


@dataclass
class FramesPhase:
    """Phase.FRAMES, shown only once a video needs extracting: when every video was cached,
    the phase is one `cached` line instead of a bar."""

    progress: Progress
    total: int
    done: int = 0
    shown: bool = False

    def show(self) -> None:
        if not self.shown:
            self.shown = True
            self.progress.start(Phase.FRAMES, self.total)
            if self.done:  # cached videos checked before this one
                self.progress.advance(Phase.FRAMES, self.done)

    def one_done(self) -> None:
        self.done += 1
        if self.shown:
            self.progress.advance(Phase.FRAMES, self.done)

    def end(self) -> None:
        if self.shown:
            self.progress.finish(Phase.FRAMES)
        else:
            self.progress.cached(Phase.FRAMES, self.total)


@dataclass
class SessionsPhase:
    """Phase.SESSIONS of one execution, counting each outcome into `summary`."""

    progress: Progress
    summary: RunSummary

    def start(self, total: int) -> None:
        self.progress.start(Phase.SESSIONS, total)

    def count(self, outcome: SessionOutcome, _worker: WorkerSummary) -> None:
        """The worker's report of each session that ended."""
        summary = self.summary
        if outcome.status == "finished":
            summary.finished += 1
        else:
            summary.failed += 1
            summary.failures.append(outcome)
            self.progress.warn(
                f"session {outcome.session_id} failed ({outcome.stage}, {outcome.cause}): "
                f"{outcome.reason}"
            )
        self.progress.advance(Phase.SESSIONS, summary.finished + summary.failed, summary.failed)

    def finish(self) -> None:
        self.progress.finish(Phase.SESSIONS)

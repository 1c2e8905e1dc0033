"""How `streameval run` and `streameval demo` show a run's phases (streameval/progress.py)
on stderr: live bars on a terminal; plain lines elsewhere (a CI or Slurm log, a pipe,
`2>file`, with `--json` too); with `--json` on a terminal only the lines worth reading,
such as a failed session. stdout is left to results.

On a terminal:

    generating synthetic benchmark: 7/7 videos in 2.1s
    preparing frames: 7 videos already cached
    streaming sessions ━━━━━━━━━━━━━━━━━━━━━━━━━━━━               12/20 sessions 0:00:03
      (one bar per long video being decoded, while frames are prepared)

Elsewhere, a line when each phase starts and ends, and at most one every PLAIN_PERIOD_S
while one runs (no escape sequence, no carriage return):

    generating synthetic benchmark: started, 7 videos
    generating synthetic benchmark: 7/7 videos in 2.1s
    streaming sessions: started, 40 sessions
    streaming sessions: 12/40 sessions, 1 failed
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from streameval.progress import UNITS, NoProgress, Phase

# Without a terminal, the most often a running phase prints a line: a log stays short, and
# still says within this long that the run goes on.
PLAIN_PERIOD_S = 30.0


class WarningsOnly(NoProgress):
    """No progress, only the warnings (a failed session), one line each."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> WarningsOnly:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def warn(self, message: str) -> None:
        # Text, not markup: a failure reason may hold brackets.
        self.console.print(Text(message, style="yellow"))


@dataclass
class _Tally:
    """A phase's count so far."""

    total: int | None
    started: float
    done: int = 0
    failed: int = 0


class TerminalProgress(WarningsOnly):
    """A bar per phase in progress (its total shown from its start) and one per long video
    being decoded; a phase that ends leaves one line with its count and time, a cached phase
    one line that says so."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self._bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            redirect_stdout=False,  # stdout carries results, never progress
        )
        self._phases: dict[Phase, tuple[TaskID, _Tally]] = {}
        self._items: dict[tuple[Phase, str], TaskID] = {}

    def __enter__(self) -> TerminalProgress:
        self._bars.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._bars.stop()

    def start(self, phase: Phase, total: int | None) -> None:
        task = self._bars.add_task(phase.value, total=total, count=_count(phase, 0, total, 0))
        self._phases[phase] = task, _Tally(total, time.monotonic())
        self._bars.refresh()  # on screen at once: the total shows before any item ends

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        task, tally = self._phases[phase]
        tally.done, tally.failed = done, failed
        self._bars.update(task, completed=done, count=_count(phase, done, tally.total, failed))

    def item(self, phase: Phase, name: str, done_s: float, total_s: float) -> None:
        key = (phase, name)
        if done_s >= total_s:
            if key in self._items:
                self._bars.remove_task(self._items.pop(key))
            return
        count = f"{done_s:.0f}/{total_s:.0f} s decoded"
        if key in self._items:
            self._bars.update(self._items[key], completed=done_s, count=count)
        else:
            self._items[key] = self._bars.add_task(
                f"  {name}", total=total_s, completed=done_s, count=count
            )

    def finish(self, phase: Phase) -> None:
        task, tally = self._phases.pop(phase)
        self._bars.remove_task(task)
        self._bars.refresh()  # else the line below is drawn above the bar it replaces
        self.console.print(Text(_finished(phase, tally, time.monotonic())))

    def cached(self, phase: Phase, total: int) -> None:
        self.console.print(Text(_cached(phase, total)))


class PlainProgress(WarningsOnly):
    """Plain lines for a log: one when a phase starts, ends or was cached, and while it runs
    at most one every `period_s` of `clock`, with its count (or, while frames are prepared,
    how far the video being decoded is)."""

    def __init__(
        self,
        console: Console,
        period_s: float = PLAIN_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(console)
        self._period_s = period_s
        self._clock = clock
        self._phases: dict[Phase, _Tally] = {}
        self._last_line = clock()

    def start(self, phase: Phase, total: int | None) -> None:
        self._phases[phase] = _Tally(total, self._clock())
        count = f", {total} {UNITS[phase]}" if total is not None else ""
        self._line(f"{phase.value}: started{count}")

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        tally = self._phases[phase]
        tally.done, tally.failed = done, failed
        if self._due():
            self._line(f"{phase.value}: {_count(phase, done, tally.total, failed)}")

    def item(self, phase: Phase, name: str, done_s: float, total_s: float) -> None:
        if done_s < total_s and self._due():
            self._line(f"{phase.value}: {name} {done_s:.0f}/{total_s:.0f} s decoded")

    def finish(self, phase: Phase) -> None:
        self._line(_finished(phase, self._phases.pop(phase), self._clock()))

    def cached(self, phase: Phase, total: int) -> None:
        self._line(_cached(phase, total))

    def warn(self, message: str) -> None:
        self._line(message)

    def _due(self) -> bool:
        return self._clock() - self._last_line >= self._period_s

    def _line(self, text: str) -> None:
        self._last_line = self._clock()
        self.console.print(Text(text), soft_wrap=True)  # one line whatever the width


def _finished(phase: Phase, tally: _Tally, now: float) -> str:
    """`preparing frames: 3/3 videos in 2.1s`, `scoring: done in 0.4s`."""
    count = _count(phase, tally.done, tally.total, tally.failed) or "done"
    return f"{phase.value}: {count} in {now - tally.started:.1f}s"


def _cached(phase: Phase, total: int) -> str:
    return f"{phase.value}: {total} {UNITS[phase]} already cached"


def _count(phase: Phase, done: int, total: int | None, failed: int) -> str:
    """`3/7 videos`, `12/20 sessions, 1 failed`; nothing for a phase without a count."""
    if total is None:
        return ""
    failures = f", {failed} failed" if failed else ""
    return f"{done}/{total} {UNITS[phase]}{failures}"


def progress_display(console: Console, show: bool) -> WarningsOnly:
    """On a terminal, live bars when `show`, else (`--json`) warnings only; without one
    (a log, a pipe, a dumb terminal), plain lines whatever `show`: nobody reads a log live,
    and a silent one cannot tell a slow run from a stuck one."""
    if not console.is_terminal or console.is_dumb_terminal:
        return PlainProgress(console)
    return TerminalProgress(console) if show else WarningsOnly(console)

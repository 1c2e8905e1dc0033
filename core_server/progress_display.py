"""How `streameval run` and `streameval demo` show a run's phases (core_server/progress.py)
on stderr: live bars on a terminal; elsewhere (a log, a pipe, `--json`) only the lines
worth reading, such as a failed session. stdout is left to results.

On a terminal:

    generating synthetic benchmark: 7/7 videos in 2.1s
    preparing frames: 7 videos already cached
    streaming sessions ━━━━━━━━━━━━━━━━━━━━━━━━━━━━               12/20 sessions 0:00:03
      (one bar per long video being decoded, while frames are prepared)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from streameval.core.progress import UNITS, NoProgress, Phase


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
class _Bar:
    task: TaskID
    total: int | None
    started: float = field(default_factory=time.monotonic)
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
        self._phases: dict[Phase, _Bar] = {}
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
        self._phases[phase] = _Bar(task, total)
        self._bars.refresh()  # on screen at once: the total shows before any item ends

    def advance(self, phase: Phase, done: int, failed: int = 0) -> None:
        bar = self._phases[phase]
        bar.done, bar.failed = done, failed
        self._bars.update(bar.task, completed=done, count=_count(phase, done, bar.total, failed))

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
        bar = self._phases.pop(phase)
        self._bars.remove_task(bar.task)
        self._bars.refresh()  # else the line below is drawn above the bar it replaces
        count = _count(phase, bar.done, bar.total, bar.failed) or "done"
        took = time.monotonic() - bar.started
        self.console.print(Text(f"{phase.value}: {count} in {took:.1f}s"))

    def cached(self, phase: Phase, total: int) -> None:
        self.console.print(Text(f"{phase.value}: {total} {UNITS[phase]} already cached"))


def _count(phase: Phase, done: int, total: int | None, failed: int) -> str:
    """`3/7 videos`, `12/20 sessions, 1 failed`; nothing for a phase without a count."""
    if total is None:
        return ""
    failures = f", {failed} failed" if failed else ""
    return f"{done}/{total} {UNITS[phase]}{failures}"


def progress_display(console: Console, show: bool) -> WarningsOnly:
    """Live bars when `show` and the console is a terminal; else warnings only."""
    if show and console.is_terminal and not console.is_dumb_terminal:
        return TerminalProgress(console)
    return WarningsOnly(console)

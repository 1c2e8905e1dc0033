"""A `streameval` server run as its own process, as a user starts it, found through the
"listening on URL" line it prints (streameval/listening.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from streameval.listening import listened_url


@dataclass(frozen=True)
class Served:
    process: subprocess.Popen[str]
    line: str  # its listening line, without the newline

    @property
    def url(self) -> str:
        return listened_url(self.line)


def streameval_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "streameval.cli", *args]


@contextmanager
def served(command: list[str], env: dict[str, str] | None = None) -> Iterator[Served]:
    """Start `command`, wait for its listening line, and stop it (SIGTERM) on exit."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert process.stdout is not None
        # The listening line is the first line on stdout (a generated token goes to stderr).
        line = process.stdout.readline().rstrip("\n")
        if " listening on " not in line:
            process.kill()
            raise AssertionError(f"no listening line: {line!r}; {process.communicate()[1]}")
        yield Served(process, line)
    finally:
        process.terminate()
        process.wait(timeout=10)

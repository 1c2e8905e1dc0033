"""One builder per cache entry across processes: workers sharing a frame cache (on one
machine, or a shared file system that honours flock) decode each video once instead of once
each, and a worker decoding ahead leaves a video that another process is already decoding.

The lock is an flock on `<entry>.lock` beside the entry; the kernel drops it with a process
that dies, so a killed builder never blocks the others. A builder that stops without dying
(SIGSTOP, a hung file system) keeps its lock: a waiter that sees its partial folder untouched
for SILENT_BUILDER_S builds the entry itself, as every process did before the lock.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from streameval.core.frames.errors import cache_io

try:
    import fcntl
except ImportError:  # not POSIX: each process builds on its own, as before
    fcntl = None  # type: ignore[assignment]

# A builder adds a JPEG to its partial folder every few seconds at most (entries.py).
SILENT_BUILDER_S = 60.0
POLL_S = 0.05


@contextlib.contextmanager
def entry_build_lock(final: Path, *, wait: bool) -> Iterator[bool]:
    """Holds the build lock of the entry `final` while the block runs and yields True; with
    `wait` False, yields False at once when another process holds it."""
    if fcntl is None:
        yield True
        return
    with cache_io(final.parent, "create a folder"):
        final.parent.mkdir(parents=True, exist_ok=True)
    with cache_io(final.parent, "open a lock file"):
        fd = os.open(final.with_name(f"{final.name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        yield _locked(fd, final, wait)
    finally:
        os.close(fd)  # releases the flock


def _locked(fd: int, final: Path, wait: bool) -> bool:
    """Whether this process may build: it holds the lock, the file system has none, or (when
    waiting) the holder went silent; False only without `wait`, the lock being held."""
    waiting_since = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if not wait:
                return False
        except OSError:  # a file system without locks (ENOLCK): build unlocked, as before
            return True
        if _silent_s(final, waiting_since) > SILENT_BUILDER_S:
            return True
        time.sleep(POLL_S)


def _silent_s(final: Path, waiting_since: float) -> float:
    """Seconds since the entry's builder last added a file to its partial folder (since the
    wait began, if it has none yet)."""
    quiet = time.monotonic() - waiting_since
    for partial in final.parent.glob(f"{final.name}.partial-*"):
        with contextlib.suppress(OSError):  # published or removed meanwhile
            quiet = min(quiet, time.time() - partial.stat().st_mtime)
    return quiet

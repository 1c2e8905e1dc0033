"""One builder per cache entry across processes: workers sharing a frame cache (on one
machine, or a shared file system that honours flock) decode each video once instead of once
each, and a worker decoding ahead leaves a video that another process is already decoding.

The lock is an flock on `<entry>.lock` beside the entry; the kernel drops it with a process
that dies, so a killed builder never blocks the others.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from streameval.core.frames.errors import cache_io

try:
    import fcntl
except ImportError:  # not POSIX: each process builds on its own, as before
    fcntl = None  # type: ignore[assignment]


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
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError:  # a file system without locks (ENOLCK): build unlocked, as before
            pass
        yield True
    finally:
        os.close(fd)  # releases the flock

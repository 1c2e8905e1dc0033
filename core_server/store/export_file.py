"""`streameval export -o FILE`: the export written under a temporary name beside FILE and
renamed onto it once whole, so a killed export never leaves a partial file at FILE.

A file already at FILE stays as it was until the rename replaces it. An export that fails
(an unknown run, a full disk) removes its temporary file; one killed outright (SIGKILL,
power loss) leaves it, named `FILE.HOST-PID.partial`, and the next export to FILE on that
host removes it once no process PID is alive. A destination that exists and is not a
regular file (/dev/stdout, a named pipe) is written in place: there is nothing to rename
onto, and a reader sees the end line only when the export finished (docs/events.md).
"""

from __future__ import annotations

import glob
import os
import socket
from pathlib import Path

from streameval.core.store.export import export_jsonl
from streameval.core.store.store import Store

PARTIAL_SUFFIX = ".partial"


def export_to_file(store: Store, run_id: str, path: Path) -> int:
    """Export the run to `path` (export_jsonl); returns the number of lines written."""
    target = path.resolve()  # a symlink's file is replaced, not the link
    if target.exists() and not target.is_file():
        with target.open("w", encoding="utf-8") as handle:
            return export_jsonl(store, run_id, handle)
    _remove_abandoned(target)
    temporary = target.with_name(f"{target.name}.{_writer()}{PARTIAL_SUFFIX}")
    # O_EXCL: never write through a link someone put at the temporary name.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            lines = export_jsonl(store, run_id, handle)
            handle.flush()
            os.fsync(handle.fileno())  # whole on disk before its name says it is
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_folder(target.parent)
    return lines


def _writer() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _remove_abandoned(target: Path) -> None:
    """Remove the temporary files that killed exports to `target` on this host left."""
    prefix, host = f"{target.name}.", socket.gethostname()
    for candidate in target.parent.glob(f"{glob.escape(prefix)}*{PARTIAL_SUFFIX}"):
        writer = candidate.name[len(prefix) : -len(PARTIAL_SUFFIX)]
        name, _, pid = writer.rpartition("-")
        if name == host and pid.isdigit() and not _alive(int(pid)):
            candidate.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (this process's own PID counts as gone: a
    file named after it is a dead process's that had the same PID)."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; a file system that cannot sync a folder is let be."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)

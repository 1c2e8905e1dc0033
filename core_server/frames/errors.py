"""How the frame pipeline fails: FramesError and its kinds (an unusable video, a failing
frame cache, image rules out of range), each with a one-line message, and the wrapping of
the cache's own OSErrors into FrameCacheError."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from streameval.core.errors import CoreError
from streameval.events import FailureCause


class FramesError(CoreError):
    """A record's frames cannot be produced or read: its session fails at stage `frames`.

    `cause` is the `session_failed` cause: `input` when the video itself is unusable (a
    rerun would fail again), `infrastructure` when the Core's own frame cache failed (a full
    disk, a deleted cache file: a rerun after fixing the machine succeeds). Never `adapter`:
    the adapter had no part in it. The message is one line.
    """

    cause: FailureCause = FailureCause.INPUT


class VideoDecodeError(FramesError):
    """A video cannot be used: missing, unreadable (a symlink loop included), corrupt,
    truncated or without video.

    The message is one line, "<path>: <what is wrong>".
    """


class VideoChangedError(FramesError):
    """A video's bytes are not those the caller expects (the run it belongs to recorded
    another sha256): "<path>: changed since the run started (...)". Cause `input`: a rerun
    fails again until the original file is back."""


class FrameCacheError(FramesError):
    """The frame cache cannot be written or read back: "frame cache <path>: <what failed>"
    (out of disk space, a file size limit, a read-only or deleted cache folder)."""

    cause = FailureCause.INFRASTRUCTURE


class ImageRulesError(CoreError, ValueError):
    """Image rules out of range (fps, width cap or JPEG quality)."""


def strerror_of(exc: OSError) -> str:
    # strerror alone ("No space left on device"): the path is named by the caller once.
    return exc.strerror or str(exc)


@contextlib.contextmanager
def cache_io(folder: Path, what: str) -> Iterator[None]:
    """Turns an OSError of the cache's own files (ENOSPC, EFBIG past RLIMIT_FSIZE, EROFS,
    EACCES) into one FrameCacheError line; errors reading the video are not wrapped here."""
    try:
        yield
    except OSError as exc:
        raise FrameCacheError(f"frame cache {folder}: cannot {what} ({strerror_of(exc)})") from None

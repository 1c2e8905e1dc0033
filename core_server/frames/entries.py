"""The frame cache's entries: one folder per video digest and image rules, built once.

Cache layout (content-addressed, shared by every run on the machine):

    root/<digest[:2]>/<digest>-<rules key>/000000.jpg ... index.json
    root/video-digests/<key>.json   (the digest memo: streameval.core.frames.digest)

An entry is built in a private `.partial-*` folder with index.json written last, then
published by one atomic rename; an entry folder without a valid index.json (left by a killed
process) is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from streameval.core.frames.digest import FileIdentity, check_unchanged
from streameval.core.frames.errors import FrameCacheError, cache_io, strerror_of
from streameval.core.frames.jpeg_writer import DecodeProgress
from streameval.core.frames.sampling import sample_video
from streameval.core.frames.types import (
    INDEX_NAME,
    FrameRef,
    ImageRules,
    VideoFrames,
    VideoInfo,
    jpeg_name,
)

log = logging.getLogger(__name__)

# Bumped whenever the sampling or encoding changes, so older cache entries are rebuilt.
INDEX_FORMAT = 3
# A builder adds a JPEG every few seconds at most; a partial folder untouched this long
# belongs to a process that died, and is deleted.
STALE_PARTIAL_S = 600.0


def entry_dir(root: Path, digest: str, rules: ImageRules) -> Path:
    return root / digest[:2] / f"{digest}-{rules.key()}"


def load_entry(folder: Path, digest: str, rules: ImageRules) -> VideoFrames | None:
    """The entry's frames, or None when it is missing, half-written or from another format."""
    try:
        index = json.loads((folder / INDEX_NAME).read_text())
        if (
            index["format"] != INDEX_FORMAT
            or index["video_digest"] != digest
            or index["rules"] != rules.key()
        ):
            return None
        frames = tuple(FrameRef(**ref) for ref in index["frames"])
        # A sample deleted from a published entry would fail sessions one by one; the
        # entry is rebuilt instead.
        if not {jpeg_name(ref.index) for ref in frames} <= set(os.listdir(folder)):
            return None
        info = VideoInfo(**index["video"])
        return VideoFrames(
            digest, index["duration_s"], index["source_fps"], rules, frames, folder, info
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_index(folder: Path, frames: VideoFrames) -> None:
    index = {
        "format": INDEX_FORMAT,
        "video_digest": frames.video_digest,
        "rules": frames.rules.key(),
        "duration_s": frames.duration_s,
        "source_fps": frames.source_fps,
        "video": asdict(frames.info),
        "frames": [asdict(ref) for ref in frames.frames],
    }
    with cache_io(folder.parent, "write an index"):
        (folder / INDEX_NAME).write_text(json.dumps(index, separators=(",", ":")))


def _remove_stale_partials(final: Path) -> None:
    cutoff = time.time() - STALE_PARTIAL_S
    for partial in final.parent.glob(f"{final.name}.partial-*"):
        # Another process may remove it between the listing and the stat.
        with contextlib.suppress(OSError):
            if partial.stat().st_mtime < cutoff:
                shutil.rmtree(partial, ignore_errors=True)


def build_entry(
    path: Path,
    source: FileIdentity,
    digest: str,
    rules: ImageRules,
    final: Path,
    on_progress: DecodeProgress | None = None,
) -> VideoFrames:
    """Decode the samples of the video at `path` into the entry `final`. `digest` is the
    sha256 of the file version `source` names: a file that is another version once decoded
    (replaced or rewritten meanwhile) is refused before anything is published, so that an
    entry never holds frames of bytes other than its digest's (VideoChangedError)."""
    with cache_io(final.parent, "create a folder"):
        final.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(final)
    partial = final.with_name(f"{final.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    with cache_io(final.parent, "create a folder"):
        partial.mkdir()
    try:
        started = time.perf_counter()
        info, duration_s, refs = sample_video(path, digest, rules, partial, on_progress=on_progress)
        built = VideoFrames(digest, duration_s, info.source_fps, rules, tuple(refs), final, info)
        _write_index(partial, built)
        check_unchanged(path, source)
        _publish(partial, final, digest, rules)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log.info(
        "sampled %s: %d frames from %.1fs of video in %.1fs",
        path,
        len(refs),
        duration_s,
        time.perf_counter() - started,
    )
    # Whichever process published first, the entry holds these same frames: same video
    # bytes, same rules, same format.
    return built


def _publish(partial: Path, final: Path, digest: str, rules: ImageRules) -> None:
    """Move a finished entry into place; if another process got there first, keep theirs."""
    if final.exists() and load_entry(final, digest, rules) is None:
        # Half-written by a killed process, unreadable, or from an older format.
        shutil.rmtree(final, ignore_errors=True)
    try:
        partial.rename(final)
    except OSError as exc:
        if load_entry(final, digest, rules) is None:
            raise FrameCacheError(
                f"frame cache {final.parent}: cannot publish an entry ({strerror_of(exc)})"
            ) from None
        shutil.rmtree(partial, ignore_errors=True)

"""A video's digest: the sha256 of its bytes, which names its cache entries.

Hashing a long video takes a while, so each digest is remembered with the file's identity
(path, device, inode, size, modification and change times): a later lookup, in any process,
that finds the same identity reuses it without reading the video. The memo lies in the
cache's root as `video-digests/<key>.json` (key: sha256 of the video's absolute path). A file
changed or replaced since changes its identity (its change time at least, which no program
can set back) and is hashed again; a digest is only remembered once the file has not changed
for DIGEST_SETTLED_NS, so two changes within one tick of the file system's clock cannot hide
each other. `FrameCache(root, verify=True)` ignores the on-disk memo and hashes each video
in full once per process.

`stat_video` is the check, before reading, that a video path names a readable regular file;
`check_unchanged`, after reading, that the file is still the version that was hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from streameval.core.frames.errors import VideoChangedError, VideoDecodeError, strerror_of

log = logging.getLogger(__name__)

DIGEST_MEMO_DIR = "video-digests"
# File systems stamp changes with a coarse clock (a few milliseconds on Linux, 2 s on FAT):
# a file changed twice within one tick keeps its timestamps. A digest is remembered only for
# a file whose last change is older than this when hashing starts, as git does for its index.
DIGEST_SETTLED_NS = 2_000_000_000
_HEX_DIGITS = frozenset("0123456789abcdef")

_digest_lock = threading.Lock()


@dataclass(frozen=True)
class FileIdentity:
    """What tells one version of a file from another without reading it."""

    path: str  # absolute, not resolved: `resolve` raises RuntimeError on a symlink loop
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int  # set by the kernel on every change: no program can set it back

    @classmethod
    def of(cls, path: Path, stat: os.stat_result) -> FileIdentity:
        return cls(
            os.path.abspath(path),
            stat.st_dev,
            stat.st_ino,
            stat.st_size,
            stat.st_mtime_ns,
            stat.st_ctime_ns,
        )

    def settled(self, at_ns: int) -> bool:
        """Whether any change after `at_ns` is sure to change this identity."""
        return max(self.mtime_ns, self.ctime_ns) < at_ns - DIGEST_SETTLED_NS


class DigestMemo:
    """Video digests remembered on disk, one small JSON file per video path, so that a new
    process finds a video's digest without reading the video. `read=False` never trusts it
    (the verifying mode); `write=False` never writes it (readers of a read-only cache)."""

    def __init__(self, folder: Path, *, read: bool = True, write: bool = True) -> None:
        self.folder = Path(folder)
        self.read = read
        self.write = write

    def get(self, identity: FileIdentity) -> str | None:
        if not self.read:
            return None
        try:
            record = json.loads(self._file(identity).read_text())
            digest = record["sha256"]
            if record["file"] != asdict(identity) or not _is_sha256(digest):
                return None
            return digest
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, identity: FileIdentity, digest: str) -> None:
        """Remember a digest; a memo that cannot be written only costs a later hash."""
        if not self.write:
            return
        target = self._file(identity)
        temporary = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")
        record = json.dumps({"file": asdict(identity), "sha256": digest})
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(record)
            # Readers see the old record or the new one, never half of one.
            temporary.replace(target)
        except OSError as exc:
            log.debug("cannot remember the digest of %s: %s", identity.path, strerror_of(exc))
            with contextlib.suppress(OSError):
                temporary.unlink()

    def _file(self, identity: FileIdentity) -> Path:
        # One flat folder: nothing in it looks like the <digest[:2]>/<entry> folders.
        key = hashlib.sha256(os.fsencode(identity.path)).hexdigest()
        return self.folder / f"{key}.json"


# Digests found in this process, by file identity: each file version is hashed once.
_digests: dict[FileIdentity, str] = {}


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and set(value) <= _HEX_DIGITS


def stat_video(path: Path) -> os.stat_result:
    """The file's status, after checking that it is a readable regular file."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise VideoDecodeError(f"{path}: video file not found") from None
    except OSError as exc:
        raise VideoDecodeError(f"{path}: cannot read video file ({exc.strerror})") from None
    if not path.is_file():
        raise VideoDecodeError(f"{path}: not a regular file")
    return stat


def file_sha256(path: Path) -> str:
    """sha256 of the file's bytes, read in full."""
    try:
        with Path(path).open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        raise VideoDecodeError(f"{path}: cannot read video file ({strerror_of(exc)})") from None


def video_digest(path: Path, memo: DigestMemo | None = None) -> str:
    """sha256 of the file's bytes, hashed once per version of the file (see FileIdentity):
    remembered in this process and, with `memo`, on disk for other processes."""
    return identified_digest(path, memo)[1]


def identified_digest(path: Path, memo: DigestMemo | None = None) -> tuple[FileIdentity, str]:
    """`video_digest`, with the identity of the file version it is the digest of: a reader
    that finds the file with another identity afterwards read another version."""
    path = Path(path)
    identity = FileIdentity.of(path, stat_video(path))
    # One lock for all files: concurrent sessions on one video then hash it only once.
    with _digest_lock:
        digest = _digests.get(identity) or (memo.get(identity) if memo else None)
        if digest is None:
            started_ns = time.time_ns()
            digest = file_sha256(path)
            if not identity.settled(started_ns):
                return identity, digest  # changed too recently to vouch for: hashed again
            if memo is not None:
                memo.put(identity, digest)
        _digests[identity] = digest
        return identity, digest


def check_unchanged(path: Path, identity: FileIdentity) -> None:
    """VideoChangedError when the file at `path` is no longer the version `identity` names
    (replaced, rewritten or touched since): what was read from it may mix two versions."""
    now = FileIdentity.of(path, stat_video(path))
    if now != identity:
        raise VideoChangedError(
            f"{path}: the file changed while its frames were extracted; they are not kept "
            "(run again once the file stays as it is)"
        )

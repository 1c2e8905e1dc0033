"""The frame cache's content key without hashing every time: the on-disk digest memo.

A video's digest (sha256 of its bytes) is remembered with the file's identity, so a new
process finds a cached entry without reading the video; a file changed or replaced since
must never be served the old digest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.frames import digest as digest_module
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.digest import DIGEST_MEMO_DIR, DigestMemo, video_digest
from streameval.core.frames.types import ImageRules
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from tests.test_frames import encode_numbered_video, sha256_of

REPO = Path(__file__).resolve().parent.parent

# Looks a cache entry up in a fresh interpreter and reports whether anything opened the
# video: hashing opens it through Python's `open`, which raises the "open" audit event.
LOOKUP_SCRIPT = """
import json, os, sys

video, root = sys.argv[1], sys.argv[2]
opened = []

def watch(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        if os.path.abspath(os.fsdecode(args[0])) == video:
            opened.append(args[0])

sys.addaudithook(watch)
from pathlib import Path
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.digest import DIGEST_MEMO_DIR, DigestMemo, video_digest
from streameval.core.frames.types import ImageRules

frames = FrameCache(root).lookup(video, ImageRules())
print(json.dumps({
    "found": frames is not None,
    # Known in this process by now: nothing more is read.
    "digest": video_digest(video, DigestMemo(Path(root) / DIGEST_MEMO_DIR, write=False)),
    "video_opened": len(opened),
}))
"""


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the digests this test process found, as a new process would not know them."""
    monkeypatch.setattr(digest_module, "_digests", {})


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch, fresh_process: None) -> None:
    """Count every file as unchanged for long enough to remember its digest (the videos of
    these tests are seconds old)."""
    monkeypatch.setattr(digest_module, "DIGEST_SETTLED_NS", -(10**12))


@pytest.fixture
def video(tmp_path: Path) -> Path:
    (tmp_path / "videos").mkdir()
    return encode_numbered_video(tmp_path / "videos" / "v.mp4", 30, 64, 48, 30)


def memo_files(root: Path) -> list[Path]:
    return sorted((root / DIGEST_MEMO_DIR).glob("*.json"))


def lookup_in_new_process(video: Path, root: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", LOOKUP_SCRIPT, str(video), str(root)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        timeout=60,
    )
    return json.loads(done.stdout)


def change_a_byte(path: Path) -> None:
    """New content of the same size, written in place (same inode)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with path.open("r+b") as f:
        f.write(data)


def test_a_warm_lookup_in_a_new_process_does_not_read_the_video(
    tmp_path: Path, video: Path, settled: None
) -> None:
    root = tmp_path / "cache"
    built = FrameCache(root).get(video, ImageRules())
    assert len(memo_files(root)) == 1

    warm = lookup_in_new_process(video, root)
    # Without the memo the same lookup hashes the video: the watch sees it opened.
    for memo in memo_files(root):
        memo.unlink()
    cold = lookup_in_new_process(video, root)

    assert warm == {"found": True, "digest": built.video_digest, "video_opened": 0}
    assert cold["digest"] == built.video_digest == sha256_of(video)
    assert cold["found"] and cold["video_opened"] >= 1


def replace_by_rename(path: Path) -> None:
    """Another file moved over the path, given the old modification time."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    other = path.with_name("other.mp4")
    other.write_bytes(data)
    os.utime(other, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    other.replace(path)


def rewrite_with_a_new_mtime(path: Path) -> None:
    stat = path.stat()
    change_a_byte(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def rewrite_keeping_the_mtime(path: Path) -> None:
    """What `cp` then `touch -r` does: only the change time (and content) differ."""
    stat = path.stat()
    change_a_byte(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def delete_and_recreate(path: Path) -> None:
    """A new file at the path, which may get the old inode number back."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.unlink()
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize(
    "change",
    [rewrite_with_a_new_mtime, rewrite_keeping_the_mtime, replace_by_rename, delete_and_recreate],
)
def test_a_changed_or_replaced_file_is_never_served_its_old_digest(
    tmp_path: Path, video: Path, settled: None, change
) -> None:
    root = tmp_path / "cache"
    old_digest = video_digest(video, DigestMemo(root / DIGEST_MEMO_DIR))
    assert len(memo_files(root)) == 1  # the memo this test must not be fooled by
    # The change lands on a later tick of the file system's clock than the file's creation.
    time.sleep(0.05)

    change(video)

    new_digest = sha256_of(video)
    assert new_digest != old_digest
    # A new process (the memo on disk) hashes the new file ...
    elsewhere = lookup_in_new_process(video, root)
    assert elsewhere["digest"] == new_digest and elsewhere["video_opened"] >= 1
    # ... and so does this one (its own memo).
    assert video_digest(video, DigestMemo(root / DIGEST_MEMO_DIR)) == new_digest


def test_a_file_changed_within_one_clock_tick_is_never_served_its_old_digest(
    tmp_path: Path, video: Path, fresh_process: None
) -> None:
    # Just written, the file may change again within its timestamps' resolution: its digest
    # is not remembered, in this process or on disk, so the change is always seen.
    memo = DigestMemo(tmp_path / "memo")
    old_digest = video_digest(video, memo)

    rewrite_keeping_the_mtime(video)

    assert not list((tmp_path / "memo").rglob("*.json"))
    assert video_digest(video, memo) == sha256_of(video) != old_digest


def test_a_settled_file_is_remembered_once_old_enough(
    tmp_path: Path, video: Path, fresh_process: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    memo = DigestMemo(tmp_path / "memo")
    video_digest(video, memo)
    assert not list((tmp_path / "memo").rglob("*.json"))

    # The file's last change now lies further back than the settling time.
    monkeypatch.setattr(digest_module, "DIGEST_SETTLED_NS", 0)
    time.sleep(0.05)
    digest = video_digest(video, memo)

    (record,) = list((tmp_path / "memo").rglob("*.json"))
    stored = json.loads(record.read_text())
    assert stored["sha256"] == digest == sha256_of(video)
    assert stored["file"]["path"] == str(video)
    assert stored["file"]["size"] == video.stat().st_size


def test_lookup_reads_the_memo_but_never_writes_it(
    tmp_path: Path, video: Path, settled: None
) -> None:
    root = tmp_path / "cache"
    assert FrameCache(root).lookup(video, ImageRules()) is None
    assert not (root / DIGEST_MEMO_DIR).exists()


def test_verify_hashes_the_video_whatever_the_memo_says(
    tmp_path: Path, video: Path, settled: None
) -> None:
    root = tmp_path / "cache"
    video_digest(video, DigestMemo(root / DIGEST_MEMO_DIR))
    (record,) = memo_files(root)
    forged = json.loads(record.read_text())
    forged["sha256"] = "f" * 64
    record.write_text(json.dumps(forged))
    digest_module._digests.clear()

    # Without verifying, the memo is believed: it is the cache's own file.
    assert FrameCache(root).lookup(video, ImageRules()) is None
    assert video_digest(video, DigestMemo(root / DIGEST_MEMO_DIR)) == "f" * 64
    digest_module._digests.clear()

    verified = FrameCache(root, verify=True).get(video, ImageRules())

    assert verified.video_digest == sha256_of(video)
    # The memo now holds the true digest for the processes that do not verify.
    assert json.loads(record.read_text())["sha256"] == sha256_of(video)


@pytest.mark.parametrize(
    "content",
    ["not json", '{"sha256": "abc"}', '{"file": {}, "sha256": "' + "0" * 64 + '"}', "[]"],
)
def test_a_broken_memo_record_is_ignored_and_rewritten(
    tmp_path: Path, video: Path, settled: None, content: str
) -> None:
    root = tmp_path / "cache"
    video_digest(video, DigestMemo(root / DIGEST_MEMO_DIR))
    (record,) = memo_files(root)
    record.write_text(content)
    digest_module._digests.clear()

    assert video_digest(video, DigestMemo(root / DIGEST_MEMO_DIR)) == sha256_of(video)
    assert json.loads(record.read_text())["sha256"] == sha256_of(video)


def test_an_unwritable_memo_only_costs_a_hash(tmp_path: Path, video: Path, settled: None) -> None:
    blocked = tmp_path / "memo"
    blocked.write_text("a file where the memo folder would go")

    assert video_digest(video, DigestMemo(blocked)) == sha256_of(video)


def test_run_verify_video_digests_reaches_the_runs_frame_cache(tmp_path: Path) -> None:
    with Store(f"sqlite:///{tmp_path / 's.db'}") as store:
        for verify in (False, True):
            config = RunConfig(
                benchmark="synthetic",
                endpoints=[EndpointConfig(url="ws://127.0.0.1:9/ws")],
                cache_dir=str(tmp_path / "cache"),
                verify_video_digests=verify,
            )
            assert RunExecutor(config, store).cache.verify is verify

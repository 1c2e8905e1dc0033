"""Video paths confined to the video root: a benchmark file names the videos a run decodes,
so an absolute path, a `..` or a symlink in it could make the Core read any file the user
can (a benchmark from elsewhere, one started over the control API). Each record whose video
resolves outside the root is a problem naming the record and the path, unless the user
allows it (`--allow-outside-video-root`: a video root made of symlinks to a shared store).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from streameval.core.benchmark.importing import Imported, Problem
from streameval.core.benchmark.records import Record

ALLOW_FLAG = "--allow-outside-video-root"


def outside_video_root(records: Iterable[Record], video_root: Path) -> list[Problem]:
    """A problem for each record whose video path, symlinks followed, lies outside
    `video_root` (itself resolved: a root that is a symlink is fine)."""
    root = os.path.realpath(video_root)
    # Strings, not Paths: a benchmark has thousands of records.
    inside = root.rstrip(os.sep) + os.sep
    targets: dict[str, str] = {}
    folders: dict[str, str] = {}  # folder as written -> resolved
    problems = []
    for record in records:
        name = record.video_path
        if name not in targets:
            targets[name] = _resolved(os.path.join(root, name), folders)
        target = targets[name]
        if target != root and not target.startswith(inside):
            problems.append(
                Problem(
                    record.record_id,
                    f"video {name!r} lies outside the video root {root} (it is {target}); "
                    f"{ALLOW_FLAG} allows it",
                )
            )
    return problems


def _resolved(path: str, folders: dict[str, str]) -> str:
    """os.path.realpath(path), each folder resolved once (`folders`): a benchmark's videos
    share a few folders, and realpath checks every component of every path."""
    folder, name = os.path.split(path)
    if name in ("", ".", "..") or os.path.islink(path):
        # realpath, not Path.resolve: a symlink loop stays as it is (the run fails that
        # video's sessions with one line) instead of raising here.
        return os.path.realpath(path)
    if folder not in folders:
        folders[folder] = os.path.realpath(folder)
    return os.path.join(folders[folder], name)


def confined(imported: Imported) -> Imported:
    """`imported` with a problem for each record whose video lies outside its video root."""
    benchmark = imported.benchmark
    found = outside_video_root(benchmark.records, Path(benchmark.video_root))
    return replace(imported, problems=[*imported.problems, *found]) if found else imported

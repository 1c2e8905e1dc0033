"""Find the benchmark a run names: the generated synthetic one (silent, or `synthetic-av`
with sound), a benchmark.json file, a
TRACE release directory, an OVO-Bench JSON file or a StreamingBench JSON file.

The format of a path is detected from what it holds; docs/benchmarks.md describes each
importer. `import_path` keeps every problem it meets (for `streameval data validate`);
`load_benchmark` refuses a source with any problem.
"""

from __future__ import annotations

import logging
from pathlib import Path

from streameval.core.benchmark import ovo_bench, streamingbench, trace_release
from streameval.core.benchmark.benchmark_json import benchmark_from_json, is_benchmark_json
from streameval.core.benchmark.importing import (
    BenchmarkError,
    Imported,
    duplicate_ids,
    read_json,
    without_unusable,
)
from streameval.core.benchmark.records import Benchmark
from streameval.core.benchmark.synthetic import AUDIO_VISUAL, SILENT, Edition, load_or_generate
from streameval.core.benchmark.video_paths import confined
from streameval.progress import NO_PROGRESS, Progress

__all__ = [
    "SYNTHETIC",
    "BenchmarkError",
    "accept",
    "import_path",
    "load_benchmark",
    "synthetic_dir",
]

logger = logging.getLogger(__name__)


# The generated benchmarks, by the name a run gives.
SYNTHETIC: dict[str, Edition] = {edition.name: edition for edition in (SILENT, AUDIO_VISUAL)}


def synthetic_dir(cache_dir: Path, seed: int, name: str = SILENT.name) -> Path:
    return cache_dir / name / f"seed-{seed}"


def import_path(
    path: Path, *, video_root: Path | None = None, subset: str | None = None
) -> Imported:
    """Import whatever `path` holds, keeping the problems of single entries; raises
    BenchmarkError only when the path cannot be read or its format is not recognised.

    `subset` (tiny, standard, full) applies to TRACE releases; `video_root` replaces the
    default, the directory holding the file or release. A record holding NaN or an infinity,
    or a task text over its limit, is a problem of every format (importing.without_unusable),
    so `load_benchmark` refuses it before a run is created.
    """
    return without_unusable(_import_any(path, video_root, subset))


def _import_any(path: Path, video_root: Path | None, subset: str | None) -> Imported:
    if path.is_dir():
        if not trace_release.is_release(path):
            raise BenchmarkError(
                f"{path} is a directory but not a TRACE release (no qa.jsonl or proactive.jsonl)"
            )
        return trace_release.import_release(path, subset or "full", video_root)
    if path.suffix == ".jsonl" and trace_release.is_release(path.parent):
        raise BenchmarkError(f"{path}: give the TRACE release directory {path.parent} instead")
    if subset not in (None, "full"):
        raise BenchmarkError(f"subsets are for TRACE release directories; {path} is a file")
    data = read_json(path)
    if is_benchmark_json(data):
        benchmark = benchmark_from_json(path, data, video_root)
        return Imported("benchmark_json", benchmark, duplicate_ids(benchmark.records))
    if ovo_bench.looks_like(data):
        return ovo_bench.import_ovo_bench(path, data, video_root)
    if streamingbench.looks_like(data):
        return streamingbench.import_streamingbench(path, data, video_root)
    raise BenchmarkError(
        f"{path}: not a benchmark this harness reads (a benchmark.json, an OVO-Bench or "
        "StreamingBench JSON file, or a TRACE release directory)"
    )


def accept(imported: Imported, source: str) -> Benchmark:
    """The benchmark, if no entry had a problem; warnings go to the log (stderr)."""
    for note in imported.notes:
        logger.warning(note)
    if imported.problems:
        more = len(imported.problems) - 1
        also = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise BenchmarkError(
            f"{imported.problems[0]}{also}; `streameval data validate {source}` lists them"
        )
    return imported.benchmark


def load_benchmark(
    name: str,
    cache_dir: Path,
    seed: int = 0,
    *,
    video_root: Path | str | None = None,
    subset: str | None = None,
    progress: Progress = NO_PROGRESS,
    allow_outside_video_root: bool = False,
) -> Benchmark:
    """'synthetic' or 'synthetic-av' (generated under `cache_dir` from `seed`, which
    `progress` hears of) or a path `import_path` reads, its videos confined to its video
    root unless allowed."""
    if name in SYNTHETIC:
        if video_root is not None or subset not in (None, "full"):
            raise BenchmarkError("the synthetic benchmark has no subsets and its own videos")
        out_dir = synthetic_dir(cache_dir, seed, name)
        return load_or_generate(out_dir, seed=seed, progress=progress, edition=SYNTHETIC[name])
    if not Path(name).exists():
        raise BenchmarkError(f"benchmark {name!r} is neither 'synthetic' nor an existing path")
    root = Path(video_root) if video_root is not None else None
    imported = import_path(Path(name), video_root=root, subset=subset)
    return accept(imported if allow_outside_video_root else confined(imported), name)

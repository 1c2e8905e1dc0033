"""The project's own benchmark format: a benchmark.json file holding a `Benchmark` (its records
and the root their video paths are relative to), as the synthetic generator writes it.

Kept apart from loader.py, which finds any benchmark a run names: the synthetic generator
reads its cached benchmark.json through this module, and the loader generates through the
synthetic one, so neither of those two imports the other's importer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from streameval.core.benchmark.importing import BenchmarkError, read_json
from streameval.core.benchmark.records import Benchmark


def load_benchmark_file(path: Path) -> Benchmark:
    """Read a benchmark.json; relative video roots are taken relative to the file."""
    return benchmark_from_json(path, read_json(path))


def benchmark_from_json(path: Path, data: Any, video_root: Path | None = None) -> Benchmark:
    """The benchmark a parsed benchmark.json holds; `video_root` replaces its own."""
    try:
        benchmark = Benchmark.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BenchmarkError(
            f"benchmark file {path}: {where}{_record_named(data, first['loc'])}: {first['msg']}"
        ) from None
    root = video_root or Path(benchmark.video_root)
    if not root.is_absolute():
        root = path.parent / root
    return benchmark.model_copy(update={"video_root": str(root)})


def _record_named(data: Any, loc: tuple) -> str:
    """ " (record <id>)" when the error lies in a record that has an id, else ""."""
    if len(loc) < 2 or loc[0] != "records" or not isinstance(loc[1], int):
        return ""
    records = data.get("records") if isinstance(data, dict) else None
    if not isinstance(records, list) or not 0 <= loc[1] < len(records):
        return ""
    record = records[loc[1]]
    ident = record.get("record_id") if isinstance(record, dict) else None
    return f" (record {ident})" if isinstance(ident, str) else ""


def is_benchmark_json(data: Any) -> bool:
    return isinstance(data, dict) and "records" in data

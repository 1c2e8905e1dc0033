"""Find the benchmark a run names: the generated synthetic one, or a benchmark.json file."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from core_server.benchmark.records import Benchmark


class BenchmarkError(Exception):
    """A benchmark that cannot be loaded; the message names the file and the problem."""


def synthetic_dir(cache_dir: Path, seed: int) -> Path:
    return cache_dir / "synthetic" / f"seed-{seed}"


def load_benchmark_file(path: Path) -> Benchmark:
    """Read a benchmark.json; relative video roots are taken relative to the file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchmarkError(f"benchmark file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise BenchmarkError(f"benchmark file {path} is not valid JSON: {exc}") from None
    try:
        benchmark = Benchmark.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BenchmarkError(f"benchmark file {path}: {where}: {first['msg']}") from None
    root = Path(benchmark.video_root)
    if not root.is_absolute():
        benchmark = benchmark.model_copy(update={"video_root": str(path.parent / root)})
    return benchmark


def load_benchmark(name: str, cache_dir: Path, seed: int = 0) -> Benchmark:
    if name == "synthetic":
        from core_server.benchmark.synthetic import load_or_generate

        return load_or_generate(synthetic_dir(cache_dir, seed), seed=seed)
    return load_benchmark_file(Path(name))

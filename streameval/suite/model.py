"""The suite file: which adapters run which benchmarks under which protocol, and the table
printed at the end (docs/suites.md). Strict: an unknown key, a missing adapter or an unknown
benchmark is one error line naming the key and its line in the file.

`read_suite` returns the file RESOLVED: every default filled in, paths made absolute
(relative ones are relative to the file's folder), labels given. That form is what the
store keeps, and what `eval --resume` runs again without the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from streameval.errors import UserError

SYNTHETIC = "synthetic"


class SuiteFileError(UserError):
    """A suite file that cannot be read or is not a valid suite."""


class _Strict(BaseModel):
    # No NaN or infinity: the resolved file is stored as JSON, which holds neither.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SuiteAdapter(_Strict):
    """One adapter, a row of the table (several entries may serve one adapter)."""

    label: str = Field(default="", description="the row's label (default: the adapter)")
    adapter: str = Field(min_length=1, description="a registered NAME or module:Class")
    options: dict[str, Any] = Field(default_factory=dict, description="the -A key=value pairs")
    config: str | None = Field(default=None, description="a preset or an adapter config YAML")
    replicas: int = Field(default=1, ge=1)
    gpus: list[int] = Field(default_factory=list, description="one replica per GPU")
    startup_timeout: float = Field(default=120.0, gt=0, description="seconds to listen")

    @model_validator(mode="after")
    def _labelled(self) -> SuiteAdapter:
        self.label = self.label or self.adapter
        return self

    def option_texts(self) -> tuple[str, ...]:
        """The options as `-A key=value` texts (non-text values as JSON, read back as YAML)."""
        return tuple(
            f"{key}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in self.options.items()
        )


class SuiteBenchmark(_Strict):
    """One benchmark's records, as `streameval run`'s options choose them."""

    label: str = Field(default="", description="the column's label (default: from the file)")
    benchmark: str = Field(min_length=1)
    video_root: str | None = None
    subset: str | None = None
    seed: int = 0
    task: list[Literal["qa", "proactive"]] = Field(default_factory=lambda: ["qa", "proactive"])
    task_type: list[str] = Field(default_factory=list)
    limit: int | None = Field(default=None, ge=1)
    allow_outside_video_root: bool = False

    @model_validator(mode="after")
    def _labelled(self) -> SuiteBenchmark:
        if not self.label:
            self.label = SYNTHETIC if self.benchmark == SYNTHETIC else Path(self.benchmark).stem
        return self


class SuiteRunOptions(_Strict):
    """The options of every run, named like `streameval run`'s (`--qa-history`: qa_history)."""

    pacing: Literal["logical", "wall_clock"] = "logical"
    speed: float = 1.0
    fps: float | None = None
    max_width: int = 960
    qa_history: float | None = None
    response_timeout: float = 60.0
    adapter_ready_timeout: float | None = None
    concurrency: int = Field(default=4, ge=1)


class SuiteTable(_Strict):
    """The table printed at the end (`streameval table`'s options)."""

    metrics: list[str] | None = None
    by: str | None = None
    intervals: bool = False
    format: Literal["markdown", "latex", "csv", "json"] = "markdown"


class Suite(_Strict):
    name: str = ""
    adapters: list[SuiteAdapter] = Field(min_length=1)
    benchmarks: list[SuiteBenchmark] = Field(min_length=1)
    protocol_profile: str = "trace"
    scoring_profile: str = Field(default="", description="default: the protocol's own")
    run: SuiteRunOptions = Field(default_factory=SuiteRunOptions)
    table: SuiteTable = Field(default_factory=SuiteTable)

    @model_validator(mode="after")
    def _unique_labels(self) -> Suite:
        for kind, labels in (
            ("adapters", [a.label for a in self.adapters]),
            ("benchmarks", [b.label for b in self.benchmarks]),
        ):
            twice = next((label for label in labels if labels.count(label) > 1), None)
            if twice is not None:
                raise ValueError(f"two {kind} are labelled {twice!r}: give each its own label")
        return self

    def cells(self) -> list[tuple[SuiteAdapter, SuiteBenchmark]]:
        """Every (adapter, benchmark), adapter by adapter: one run each."""
        return [(a, b) for a in self.adapters for b in self.benchmarks]


def read_suite(path: Path) -> Suite:
    """The suite file at `path`, checked and resolved (SuiteFileError: one line)."""
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.safe_load(text)
        lines = _key_lines(text)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SuiteFileError(f"cannot read suite file {path}: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise SuiteFileError(f"suite file {path}: not a mapping of keys (adapters, benchmarks)")
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        raise SuiteFileError(f"suite file {path}: {_first_error(exc, lines)}") from None
    return resolve(suite, path.resolve().parent, path)


def stored_suite(content: dict[str, Any]) -> Suite:
    """A suite as the store holds it (already resolved)."""
    return Suite.model_validate(content)


def resolve(suite: Suite, base: Path, path: Path) -> Suite:
    """`suite` with its paths absolute (relative ones from `base`), its scoring profile
    filled in and its profiles and benchmarks checked (SuiteFileError)."""
    from streameval.core.config import PROTOCOL_PROFILES, unknown_profile
    from streameval.scorer.profiles import SCORING_PROFILES, scoring_profile_for

    where = f"suite file {path}"
    if suite.protocol_profile not in PROTOCOL_PROFILES:
        message = unknown_profile(
            "protocol", suite.protocol_profile, PROTOCOL_PROFILES, SCORING_PROFILES
        )
        raise SuiteFileError(f"{where}: protocol_profile: {message}")
    scoring = suite.scoring_profile or scoring_profile_for(suite.protocol_profile)
    if scoring not in SCORING_PROFILES:
        message = unknown_profile("scoring", scoring, SCORING_PROFILES, PROTOCOL_PROFILES)
        raise SuiteFileError(f"{where}: scoring_profile: {message}")
    adapters = [
        _resolved_adapter(a, base, f"{where}: adapters[{i}]") for i, a in enumerate(suite.adapters)
    ]
    benchmarks = [
        _resolved_benchmark(b, base, f"{where}: benchmarks[{i}]")
        for i, b in enumerate(suite.benchmarks)
    ]
    return suite.model_copy(
        update={"scoring_profile": scoring, "adapters": adapters, "benchmarks": benchmarks}
    )


def _resolved_adapter(adapter: SuiteAdapter, base: Path, where: str) -> SuiteAdapter:
    from streameval.adapters.registry import UnknownAdapter, available_adapters

    if ":" not in adapter.adapter and adapter.adapter not in available_adapters():
        raise SuiteFileError(f"{where}.adapter: {UnknownAdapter(adapter.adapter)}")
    config = adapter.config
    if config is not None and (base / config).is_file():  # a file, else a preset's name
        config = str((base / config).resolve())
    return adapter.model_copy(update={"config": config})


def _resolved_benchmark(benchmark: SuiteBenchmark, base: Path, where: str) -> SuiteBenchmark:
    update: dict[str, Any] = {}
    if benchmark.benchmark != SYNTHETIC:
        found = (base / benchmark.benchmark).resolve()
        if not found.exists():
            raise SuiteFileError(
                f"{where}.benchmark: {benchmark.benchmark!r} is neither 'synthetic' nor an "
                f"existing path (relative to {base})"
            )
        update["benchmark"] = str(found)
    if benchmark.video_root is not None:
        update["video_root"] = str((base / benchmark.video_root).resolve())
    return benchmark.model_copy(update=update)


# ----------------------------------------------------------------------------- errors


def _key_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """The line (from 1) of every key and list item of a YAML text, by its path."""
    lines: dict[tuple[str | int, ...], int] = {}

    def walk(node: yaml.Node | None, path: tuple[str | int, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[(*path, key.value)] = key.start_mark.line + 1
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines[(*path, index)] = item.start_mark.line + 1
                walk(item, (*path, index))

    walk(yaml.compose(text, Loader=yaml.SafeLoader), ())
    return lines


def _first_error(exc: ValidationError, lines: dict[tuple[str | int, ...], int]) -> str:
    """The first problem, as `key.path: what (line N)`."""
    first = exc.errors()[0]
    loc = tuple(first["loc"])
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    what = what.removeprefix("Value error, ")
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    at = f" (line {line})" if line is not None else ""
    return f"{where}: {what}{at}" if where else f"{what}{at}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

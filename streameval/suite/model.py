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
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from streameval.errors import UserError

if TYPE_CHECKING:
    from streameval.core.cli.run_adapters import AdapterChoice
    from streameval.core.cli.run_options import RunOptions

# The generated benchmarks a suite names as they are (silent, and with sound).
SYNTHETIC = ("synthetic", "synthetic-av")
# Stands in for the adapters' endpoints while the run options are checked, before any
# adapter starts (nothing connects to it).
_NO_ENDPOINT = "ws://127.0.0.1:9/ws"
# The key of the suite file that sets each RunConfig field a run may refuse.
_RUN_KEYS = {
    "speed": "run.speed",
    "fps": "run.fps",
    "max_width": "run.max_width",
    "qa_history_s": "run.qa_history",
    "response_timeout_s": "run.response_timeout",
    "adapter_ready_timeout_s": "run.adapter_ready_timeout",
}


class SuiteFileError(UserError):
    """A suite file that cannot be read or is not a valid suite."""


class _Problem(Exception):
    """A resolved key's problem, before the file's line numbers name where it is."""

    def __init__(self, loc: tuple[str | int, ...], what: str) -> None:
        super().__init__(what)
        self.loc = loc


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

    @model_validator(mode="after")
    def _labelled(self) -> SuiteAdapter:
        if self.gpus and self.replicas not in (1, len(self.gpus)):
            raise ValueError("give replicas or gpus (one replica per GPU), not both")
        self.label = self.label or self.adapter
        return self

    def choice(self) -> AdapterChoice:
        """The adapter as `streameval run --adapter` takes it: its options as `-A key=value`
        texts (non-text values as JSON, which the adapter reads back as YAML)."""
        from streameval.core.cli.run_adapters import AdapterChoice

        options = [
            f"{key}={value if isinstance(value, str) else json.dumps(value)}"
            for key, value in self.options.items()
        ]
        gpus = ",".join(str(gpu) for gpu in self.gpus) or None
        return AdapterChoice(
            adapter=self.adapter,
            adapter_options=options,
            adapter_config=self.config,
            replicas=None if gpus else self.replicas,
            gpus=gpus,
        )


class SuiteBenchmark(_Strict):
    """One benchmark's records, as `streameval run`'s options choose them."""

    label: str = Field(default="", description="its table's title (default: from the file)")
    benchmark: str = Field(min_length=1)
    video_root: str | None = None
    subset: str | None = None
    seed: int = 0
    task: list[Literal["qa", "proactive"]] = Field(default_factory=lambda: ["qa", "proactive"])
    task_type: list[str] = Field(default_factory=list)
    limit: int | None = Field(default=None, ge=1)
    allow_outside_video_root: bool = False
    protocol_profile: str = Field(default="", description="default: the suite's")
    scoring_profile: str = Field(
        default="", description="default: the suite's, else the protocol's own"
    )

    @model_validator(mode="after")
    def _labelled(self) -> SuiteBenchmark:
        if not self.label:
            name = self.benchmark
            self.label = name if name in SYNTHETIC else Path(name).stem
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
    # Each benchmark's, unless it names its own (a suite may run TRACE under `trace` and
    # OVO-Bench under `ovo-offline`).
    protocol_profile: str = "trace"
    scoring_profile: str = Field(default="", description="default: each protocol's own")
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
    try:
        resolved = resolve(suite, path.resolve().parent)
        _check_runs(resolved)
        _check_table(resolved)
    except _Problem as exc:
        raise SuiteFileError(f"suite file {path}: {_located(exc.loc, str(exc), lines)}") from None
    return resolved


def run_options(
    suite: Suite,
    benchmark: SuiteBenchmark,
    urls: list[str],
    cache_dir: Path,
    store: str,
    resume: str | None,
    as_json: bool,
) -> RunOptions:
    """`streameval run`'s options for one benchmark of the suite, against these endpoints
    (resuming the run `resume`)."""
    from streameval.core.cli.common import RecordChoice
    from streameval.core.cli.run_options import RunOptions
    from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S, DEFAULT_LEASE_S

    run = suite.run
    records = RecordChoice(
        benchmark.benchmark,
        Path(benchmark.video_root) if benchmark.video_root else None,
        benchmark.subset,
        benchmark.seed,
        list(benchmark.task),
        list(benchmark.task_type),
        benchmark.limit,
        benchmark.allow_outside_video_root,
    )
    return RunOptions(
        adapter_url=urls,
        concurrency=run.concurrency,
        records=records,
        profile=benchmark.protocol_profile,
        pacing=run.pacing,
        speed=run.speed,
        fps=run.fps,
        max_width=run.max_width,
        qa_history=run.qa_history,
        response_timeout=run.response_timeout,
        adapter_ready_timeout=run.adapter_ready_timeout,
        cache_dir=cache_dir,
        verify_video_digests=False,
        store=store,
        resume=resume,
        retry_failed=False,
        allow_adapter_change=False,
        detach=False,
        lease_timeout=DEFAULT_LEASE_S,
        unreachable_timeout=ALL_DOWN_GIVE_UP_S,
        perturb=None,
        robustness=None,
        perturb_seed=0,
        as_json=as_json,
    )


def _check_runs(suite: Suite) -> None:
    """_Problem on run options a run would refuse, before any adapter starts."""
    from streameval.core.cli.common import first_validation_error

    for benchmark in suite.benchmarks:
        options = run_options(suite, benchmark, [_NO_ENDPOINT], Path(), "", None, True)
        try:
            options.config(None)  # type: ignore[arg-type]  # a new run's reads no store
        except ValueError as exc:
            field, _, what = first_validation_error(exc).partition(": ")
            key = _RUN_KEYS.get(field, field)
            raise _Problem(tuple(key.split(".")), what or field) from None


def _check_table(suite: Suite) -> None:
    """_Problem on a table no benchmark's scoring profile can make, before anything runs."""
    from streameval.scorer.errors import ScoreError
    from streameval.scorer.paper_table import GROUPINGS, table_columns
    from streameval.scorer.profiles import get_profile

    if suite.table.by is not None and suite.table.by not in GROUPINGS:
        raise _Problem(("table", "by"), f"takes {' or '.join(GROUPINGS)}, not {suite.table.by!r}")
    for benchmark in suite.benchmarks:
        try:
            table_columns(get_profile(benchmark.scoring_profile), suite.table.metrics)
        except ScoreError as exc:
            raise _Problem(("table", "metrics"), f"benchmark {benchmark.label}: {exc}") from None


def stored_suite(content: dict[str, Any]) -> Suite:
    """A suite as the store holds it (already resolved)."""
    return Suite.model_validate(content)


def resolve(suite: Suite, base: Path) -> Suite:
    """`suite` with its paths absolute (relative ones from `base`), each benchmark's
    profiles filled in, and its adapters, benchmarks and profiles checked (_Problem)."""
    adapters = [_resolved_adapter(a, base, i) for i, a in enumerate(suite.adapters)]
    benchmarks = [_resolved_benchmark(suite, b, base, i) for i, b in enumerate(suite.benchmarks)]
    return suite.model_copy(update={"adapters": adapters, "benchmarks": benchmarks})


def _resolved_adapter(adapter: SuiteAdapter, base: Path, index: int) -> SuiteAdapter:
    from streameval.adapters.registry import UnknownAdapter, available_adapters

    if ":" not in adapter.adapter and adapter.adapter not in available_adapters():
        raise _Problem(("adapters", index, "adapter"), str(UnknownAdapter(adapter.adapter)))
    config = adapter.config
    if config is not None and (base / config).is_file():  # a file, else a preset's name
        config = str((base / config).resolve())
    return adapter.model_copy(update={"config": config})


def _resolved_benchmark(
    suite: Suite, benchmark: SuiteBenchmark, base: Path, index: int
) -> SuiteBenchmark:
    update = _profiles(suite, benchmark, ("benchmarks", index))
    if benchmark.benchmark not in SYNTHETIC:
        found = (base / benchmark.benchmark).resolve()
        if not found.exists():
            raise _Problem(
                ("benchmarks", index, "benchmark"),
                f"{benchmark.benchmark!r} is neither 'synthetic' nor an existing path "
                f"(relative to {base})",
            )
        update["benchmark"] = str(found)
    if benchmark.video_root is not None:
        update["video_root"] = str((base / benchmark.video_root).resolve())
    return benchmark.model_copy(update=update)


def _profiles(
    suite: Suite, benchmark: SuiteBenchmark, own: tuple[str | int, ...]
) -> dict[str, Any]:
    """The benchmark's protocol and scoring profiles, checked; an error names the key that
    gave the profile (the benchmark's, at `own`, or the suite's)."""
    from streameval.core.config import PROTOCOL_PROFILES, unknown_profile
    from streameval.scorer.profiles import SCORING_PROFILES, scoring_profile_for

    protocol = benchmark.protocol_profile or suite.protocol_profile
    if protocol not in PROTOCOL_PROFILES:
        problem = unknown_profile("protocol", protocol, PROTOCOL_PROFILES, SCORING_PROFILES)
        where = own if benchmark.protocol_profile else ()
        raise _Problem((*where, "protocol_profile"), problem)
    scoring = benchmark.scoring_profile or suite.scoring_profile or scoring_profile_for(protocol)
    if scoring not in SCORING_PROFILES:
        problem = unknown_profile("scoring", scoring, SCORING_PROFILES, PROTOCOL_PROFILES)
        where = own if benchmark.scoring_profile else ()
        raise _Problem((*where, "scoring_profile"), problem)
    return {"protocol_profile": protocol, "scoring_profile": scoring}


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
    what = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    return _located(tuple(first["loc"]), what.removeprefix("Value error, "), lines)


def _located(loc: tuple[str | int, ...], what: str, lines: dict[tuple[str | int, ...], int]) -> str:
    """`what` at the key `loc`, as `key.path: what (line N)` (the line where known)."""
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    at = f" (line {line})" if line is not None else ""
    return f"{where}: {what}{at}" if where else f"{what}{at}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())

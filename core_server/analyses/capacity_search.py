"""Capacity at a latency target: how many concurrent live streams one endpoint holds
(docs/capacity.md).

A *level* of N is an ordinary wall-clock run of N sessions started together against the one
endpoint (its concurrency N), so its events are stored and scored like any run's. The search
doubles N from `start` until a level breaks the SLO, then bisects between the last passing and
the first failing level; the answer is the largest N that met every SLO term.

What a level measures comes from two places, neither recomputed here:
- answers (TTFT, latency, accuracy) from the scorer, run as `streameval score --json` in its
  own process: the Core never imports the scorer (tests/test_import_graph.py);
- delivery (frame lag against the schedule, dropped frames) from the Core's own records,
  `frame_sent.lag_ns` and `frame_dropped`, which the scorer does not summarise.

The search is stored as a run of its own (no sessions; its levels are ordinary runs) with
the analysis `capacity`: the SLO, one curve point per level and the answer.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
from pydantic import BaseModel

from streameval.child_process import module_command
from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord
from streameval.core.config import EndpointConfig, RunConfig
from streameval.core.errors import CoreError
from streameval.core.run.capacity import session_capacity
from streameval.core.run.endpoint_admission import INFO_TIMEOUT_S, fetch_info
from streameval.core.run.errors import EndpointUnusable
from streameval.core.run.inputs import create_run
from streameval.core.run.run_creation import new_run_id
from streameval.core.run.run_records import select_records
from streameval.core.run.runner import RunExecutor
from streameval.core.store.store import Store
from streameval.events import EventKind
from streameval.progress import NO_PROGRESS
from streameval.protocol import INFO_SERVER_METRICS

ANALYSIS = "capacity"  # the name of the analysis a capacity run stores

# How often the server's metrics are read while a level runs (its gauges' peaks).
SERVER_POLL_S = 1.0
SERVER_TIMEOUT_S = 5.0


class CapacityError(CoreError):
    """A capacity search that cannot start or go on (bad --slo, unusable benchmark, a level
    that could not run or be scored)."""


# --------------------------------------------------------------------------- the SLO

Bound = Literal["max", "min"]


@dataclass(frozen=True)
class TermSpec:
    metric: str  # the LevelMetrics field it bounds
    bound: Bound  # "max": the metric may be at most the limit; "min": at least
    rate: bool  # a fraction: its limit lies in [0, 1]


SLO_TERMS: dict[str, TermSpec] = {
    "ttft_p50": TermSpec("ttft_p50_s", "max", False),
    "ttft_p95": TermSpec("ttft_p95_s", "max", False),
    "latency_p95": TermSpec("latency_p95_s", "max", False),
    "lag_p99": TermSpec("lag_p99_s", "max", False),
    "drop_rate": TermSpec("drop_rate", "max", True),
    "failed_rate": TermSpec("failed_rate", "max", True),
    "qa_accuracy": TermSpec("qa_accuracy", "min", True),
    "in_window_accuracy": TermSpec("in_window_accuracy", "min", True),
}


class SloTerm(BaseModel):
    term: str
    metric: str
    bound: Bound
    limit: float

    def text(self) -> str:
        return f"{self.term} {'<=' if self.bound == 'max' else '>='} {self.limit:g}"

    def broken_by(self, metrics: LevelMetrics) -> str | None:
        """Why the level's metrics break this term, or None when they meet it. A metric
        without a value (no QA record answered, say) breaks it: nothing shows it is met."""
        value = getattr(metrics, self.metric)
        if value is None:
            return f"{self.term}: no value"
        if value > self.limit if self.bound == "max" else value < self.limit:
            return f"{self.term} {value:.4g} {'>' if self.bound == 'max' else '<'} {self.limit:g}"
        return None


def parse_slo(text: str) -> list[SloTerm]:
    """`ttft_p95=1.0,lag_p99=0.5` as terms; CapacityError (one line) for anything else.
    Sessions must not fail: `failed_rate=0` is added unless the text bounds it itself."""
    known = ", ".join(SLO_TERMS)
    terms: dict[str, SloTerm] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, equals, raw = (s.strip() for s in part.partition("="))
        if not equals:
            raise CapacityError(f"--slo term {part!r} is not TERM=VALUE (terms: {known})")
        spec = SLO_TERMS.get(name)
        if spec is None:
            raise CapacityError(f"unknown --slo term {name!r}; known: {known}")
        if name in terms:
            raise CapacityError(f"--slo names {name} twice")
        try:
            limit = float(raw)
        except ValueError:
            raise CapacityError(f"--slo {name}: {raw!r} is not a number") from None
        if not math.isfinite(limit) or limit < 0 or (spec.rate and limit > 1):
            allowed = "between 0 and 1" if spec.rate else "a finite number of seconds, at least 0"
            raise CapacityError(f"--slo {name}: {raw} is not {allowed}")
        terms[name] = SloTerm(term=name, metric=spec.metric, bound=spec.bound, limit=limit)
    if not terms:
        raise CapacityError(f"--slo names no term: give TERM=VALUE[,TERM=VALUE...] ({known})")
    terms.setdefault(
        "failed_rate", SloTerm(term="failed_rate", metric="failed_rate", bound="max", limit=0)
    )
    return list(terms.values())


# --------------------------------------------------------------------------- one level


class LevelMetrics(BaseModel):
    """What one level measured. Answer timings and accuracies are the scorer's (QA TTFT and
    latency on the Core's clock from the question's scheduled time, so Core lag counts);
    lag and drops are the Core's delivery records; `None`: nothing to measure it on."""

    sessions: int
    finished: int
    failed: int
    failed_rate: float
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    latency_p95_s: float | None
    qa_accuracy: float | None
    in_window_accuracy: float | None
    lag_p99_s: float | None
    frames_sent: int
    frames_dropped: int
    drop_rate: float | None


class ServerMetrics(BaseModel):
    """The model server's own Prometheus metrics over one level: `start` and `end` as read
    before and after it, `peak` the largest gauge values read while it ran (every
    SERVER_POLL_S), and the server's TTFT and requests over the level (differences of its
    histogram and counter). `error`: the endpoint could not be read (the rest is empty)."""

    url: str
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    peak: dict[str, float] = {}
    requests: float | None = None
    ttft_mean_s: float | None = None
    error: str | None = None


class CurvePoint(BaseModel):
    sessions: int
    run_id: str
    passed: bool
    broken: list[str]  # the SLO terms the level broke, each with its value
    metrics: LevelMetrics
    server: ServerMetrics | None = None
    tried: int  # the level's place in the search (1 = first run)


class CapacityResult(BaseModel):
    """The stored analysis `capacity` of a capacity run."""

    adapter_url: str
    slo: list[SloTerm]
    start: int
    max: int
    sessions_per_level: int | None  # None: N sessions at level N
    speed: float
    server_metrics: str | None
    points: list[CurvePoint]  # by sessions
    complete: bool  # the search ended (not interrupted or stopped part-way)
    capacity: int | None  # the largest level meeting every term (0: none did)
    first_failing: int | None  # the smallest level that broke a term
    limited_by_max: bool  # `max` itself passed: the endpoint may hold more


# --------------------------------------------------------------------------- the search


def next_level(passed: dict[int, bool], start: int, most: int) -> int | None:
    """The next level to run given the levels run so far (None: the search is over).

    Double from `start` while levels pass (capped at `most`); after the first failure,
    bisect between the largest passing level below it (0 if none) and it."""
    if not passed:
        return start
    failing = [n for n, ok in passed.items() if not ok]
    if not failing:
        top = max(passed)
        return None if top >= most else min(top * 2, most)
    high = min(failing)
    low = max((n for n, ok in passed.items() if ok and n < high), default=0)
    if high - low <= 1:
        return None
    return (low + high) // 2


def answer(passed: dict[int, bool]) -> tuple[int | None, int | None]:
    """(capacity, first failing level): the largest passing level below the first failing
    one (0 when none passed), None while nothing ran."""
    if not passed:
        return None, None
    failing = [n for n, ok in passed.items() if not ok]
    high = min(failing) if failing else None
    below = [n for n, ok in passed.items() if ok and (high is None or n < high)]
    return max(below, default=0), high


@dataclass
class SearchSettings:
    adapter_url: str
    slo: list[SloTerm]
    base: RunConfig  # the level's run configuration; endpoints and benchmark are set per level
    start: int = 1
    most: int = 256
    sessions_per_level: int | None = None
    server_metrics: str | None = None


Notice = Callable[[str], None]


async def server_metrics_of(adapter_url: str) -> str | None:
    """The Prometheus endpoint the adapter's /info names (the `openai` adapter names its
    model server's), or None: an adapter that names none, or whose /info fails, is simply
    measured without server metrics."""
    endpoint = EndpointConfig(url=adapter_url)
    try:
        async with httpx.AsyncClient(timeout=INFO_TIMEOUT_S) as client:
            info = await fetch_info(client, endpoint)
    except (httpx.HTTPError, EndpointUnusable):
        return None
    url = info.get(INFO_SERVER_METRICS)
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def scored(store_url: str, run_id: str) -> dict[str, Any]:
    """The scorer's JSON for a run, from `streameval score RUN --json` in a child process
    (the store named in its environment: a password stays out of the process list)."""
    env = {**os.environ, "STREAMEVAL_STORE": store_url}
    command = module_command("streameval.cli", "score", run_id, "--json")
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CapacityError(f"scoring level run {run_id} failed: {last}")
    return json.loads(done.stdout)


class CapacitySearch:
    """Runs the levels one after another into `store` and stores the search as a run."""

    def __init__(
        self,
        settings: SearchSettings,
        store: Store,
        store_url: str,
        *,
        notice: Notice | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.store_url = store_url  # as given (with any password): the scorer opens it too
        self.notice = notice
        self.run_id = new_run_id()
        self.points: list[CurvePoint] = []
        self._records: list[QARecord | ProactiveRecord] = []
        self._benchmark: Benchmark | None = None

    # ------------------------------------------------------------------ entry point

    async def run(self) -> CapacityResult:
        """Search, storing the curve after every level (an interrupted search keeps what
        it measured); the capacity run ends `finished`, or `interrupted`/`failed`."""
        self._load()
        if self.settings.server_metrics is None:
            self.settings.server_metrics = await server_metrics_of(self.settings.adapter_url)
        self._create_run()
        self._store_result(complete=False)  # a capacity search from the start, if empty
        try:
            while (level := next_level(self._passed(), self.settings.start, self.most)) is not None:
                point = await self._level(level)
                self.points.append(point)
                self._store_result(complete=False)
                verdict = "meets the SLO" if point.passed else "breaks " + "; ".join(point.broken)
                if self.notice is not None:
                    sessions = "1 session" if level == 1 else f"{level} sessions"
                    self.notice(f"{sessions} at once: {verdict} (run {point.run_id})")
        except Exception:
            self.store.set_run_status(self.run_id, "failed")
            raise
        except BaseException:  # Ctrl-C, SIGTERM: what was measured stays, as measured
            self.store.set_run_status(self.run_id, "interrupted")
            raise
        result = self._store_result(complete=True)
        self.store.set_run_status(self.run_id, "finished")
        return result

    @property
    def most(self) -> int:
        """`max`, capped at what this process can hold at once (a worker would otherwise run
        a level with fewer sessions in flight than it names)."""
        return min(self.settings.most, session_capacity())

    def _passed(self) -> dict[int, bool]:
        return {point.sessions: point.passed for point in self.points}

    # ------------------------------------------------------------------ setup

    def _load(self) -> None:
        base = self.settings.base
        benchmark = load_benchmark(
            base.benchmark,
            Path(base.cache_dir),
            base.benchmark_seed,
            video_root=base.video_root,
            subset=base.subset,
            allow_outside_video_root=base.allow_outside_video_root,
        )
        records = select_records(benchmark, base)
        if not records:
            raise CapacityError(
                "the benchmark selection is empty: check --task/--task-type/--limit"
            )
        self._benchmark, self._records = benchmark, records

    def _create_run(self) -> None:
        assert self._benchmark is not None
        settings = self.settings
        search = {
            "adapter_url": settings.adapter_url,
            "slo": [term.model_dump() for term in settings.slo],
            "start": settings.start,
            "max": settings.most,
            "sessions_per_level": settings.sessions_per_level,
            "server_metrics": settings.server_metrics,
        }
        level = settings.base.resolved().model_dump(mode="json", exclude={"endpoints"})
        create_run(
            self.store,
            self.run_id,
            benchmark=f"capacity search: {self._benchmark.name}@{self._benchmark.version}",
            # `profile` and `pacing` on top, where run listings read them.
            config={
                "kind": "capacity_search",
                "profile": level["profile"],
                "pacing": level["pacing"],
                "capacity_search": search,
                "level": level,
            },
            conditions={"run": settings.base.run_conditions().model_dump(), "adapters": []},
            records=[],
        )
        self.store.set_run_status(self.run_id, "running")

    def _store_result(self, *, complete: bool) -> CapacityResult:
        capacity, first_failing = answer(self._passed())
        result = CapacityResult(
            adapter_url=self.settings.adapter_url,
            slo=self.settings.slo,
            start=self.settings.start,
            max=self.most,
            sessions_per_level=self.settings.sessions_per_level,
            speed=self.settings.base.speed,
            server_metrics=self.settings.server_metrics,
            points=sorted(self.points, key=lambda point: point.sessions),
            complete=complete,
            capacity=capacity,
            first_failing=first_failing,
            limited_by_max=self._passed().get(self.most, False),
        )
        self.store.put_analysis(self.run_id, ANALYSIS, result.model_dump(mode="json"))
        return result

    # ------------------------------------------------------------------ one level

    async def _level(self, sessions: int) -> CurvePoint:
        config = self._level_config(sessions)
        executor = RunExecutor(config, self.store, NO_PROGRESS)
        executor.notice = None
        watch = ServerWatch(self.settings.server_metrics) if self.settings.server_metrics else None
        if watch is not None:
            await watch.begin()
        try:
            level_run = await executor.prepare()
            self._tag_level(level_run, sessions)
            summary = await executor.execute(level_run)
        finally:
            if watch is not None:
                await watch.end()
        metrics = await asyncio.to_thread(
            self._measure, level_run, summary.total, summary.failed_total
        )
        broken = [why for term in self.settings.slo if (why := term.broken_by(metrics))]
        return CurvePoint(
            sessions=sessions,
            run_id=level_run,
            passed=not broken,
            broken=broken,
            metrics=metrics,
            server=None if watch is None else watch.result(),
            tried=len(self.points) + 1,
        )

    def _level_config(self, sessions: int) -> RunConfig:
        """The base configuration over this level's benchmark file, N sessions at once."""
        assert self._benchmark is not None
        count = max(sessions, self.settings.sessions_per_level or 0)
        folder = Path(self.settings.base.cache_dir) / "capacity"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.run_id}-{sessions}.json"
        level = Benchmark(
            name=self._benchmark.name,
            version=self._benchmark.version,
            video_root=str(Path(self._benchmark.video_root).resolve()),
            records=cycled(self._records, count),
        )
        path.write_text(level.model_dump_json())
        return self.settings.base.model_copy(
            update={
                "benchmark": str(path),
                "benchmark_seed": 0,
                "subset": None,
                "limit": None,
                "video_root": level.video_root,
                "endpoints": [EndpointConfig(url=self.settings.adapter_url, concurrency=sessions)],
            }
        )

    def _tag_level(self, level_run: str, sessions: int) -> None:
        """Name the search in the level run's conditions, and give the search run the
        adapter identity its first level found."""
        conditions = dict(self.store.get_run(level_run).conditions)
        conditions["capacity_level"] = {"search": self.run_id, "sessions": sessions}
        self.store.update_run_conditions(level_run, conditions)
        search = dict(self.store.get_run(self.run_id).conditions)
        if not search.get("adapters"):
            search["adapters"] = conditions.get("adapters") or []
            self.store.update_run_conditions(self.run_id, search)

    def _measure(self, level_run: str, sessions: int, failed: int) -> LevelMetrics:
        scores = scored(self.store_url, level_run)
        overall = scores.get("overall", {})
        lags: list[float] = []
        dropped = 0
        for event in self.store.iter_events(level_run):
            if event.kind == EventKind.FRAME_SENT and event.payload.lag_ns is not None:
                lags.append(event.payload.lag_ns / 1e9)
            elif event.kind == EventKind.FRAME_DROPPED:
                dropped += 1
        frames = len(lags) + dropped
        return LevelMetrics(
            sessions=sessions,
            finished=sessions - failed,
            failed=failed,
            failed_rate=failed / sessions,
            ttft_p50_s=_value(overall, "qa", "ttft_s_p50"),
            ttft_p95_s=_value(overall, "qa", "ttft_s_p95"),
            latency_p95_s=_value(overall, "qa", "latency_s_p95"),
            qa_accuracy=_value(overall, "qa", "accuracy"),
            in_window_accuracy=_value(overall, "proactive", "in_window_accuracy"),
            # The scorer's quantile (numpy's linear interpolation), over every frame sent.
            lag_p99_s=float(np.quantile(lags, 0.99)) if lags else None,
            frames_sent=len(lags),
            frames_dropped=dropped,
            drop_rate=dropped / frames if frames else None,
        )


def _value(overall: dict[str, Any], family: str, metric: str) -> float | None:
    return (overall.get(family) or {}).get(metric, {}).get("value")


def cycled(
    records: list[QARecord | ProactiveRecord], count: int
) -> list[QARecord | ProactiveRecord]:
    """`count` records: the selection in order, repeated as often as needed; a repeat gets
    `~2`, `~3`... after its id (a session is one record, and ids are unique in a run)."""
    out = []
    for position in range(count):
        record = records[position % len(records)]
        round_ = position // len(records)
        if round_:
            record = record.model_copy(update={"record_id": f"{record.record_id}~{round_ + 1}"})
        out.append(record)
    return out


# --------------------------------------------------------------------------- server metrics

# The vLLM metrics a curve point keeps (each summed over its label sets): queue and batch
# gauges, KV-cache use (named both ways vLLM has), and the counters and histograms whose
# differences over a level are its requests, tokens and TTFT as the server saw them.
GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
)
COUNTERS = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
)


def parse_prometheus(text: str) -> dict[str, float]:
    """Each sample name's value summed over its label sets, from Prometheus text format
    (`name{labels} value [timestamp]`; comments skipped). A line that does not parse is
    skipped: one odd metric must not hide the others."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        values[name.strip()] = values.get(name.strip(), 0.0) + value
    return values


async def scrape(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    """The watched metrics the server reports now (httpx.HTTPError when it cannot say)."""
    response = await client.get(url)
    response.raise_for_status()
    parsed = parse_prometheus(response.text)
    return {name: parsed[name] for name in GAUGES + COUNTERS if name in parsed}


class ServerWatch:
    """Reads a server's /metrics before, during (every SERVER_POLL_S) and after a level. A
    server without the endpoint is noted in the point, never fatal."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = httpx.AsyncClient(timeout=SERVER_TIMEOUT_S)
        self._start: dict[str, float] = {}
        self._end: dict[str, float] = {}
        self._peak: dict[str, float] = {}
        self._error: str | None = None
        self._poller: asyncio.Task[None] | None = None

    async def begin(self) -> None:
        self._start = await self._read() or {}
        if self._error is None:
            self._poller = asyncio.create_task(self._poll())

    async def end(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        if self._error is None:
            self._end = await self._read() or {}
        await self._client.aclose()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(SERVER_POLL_S)
            await self._read()

    async def _read(self) -> dict[str, float] | None:
        try:
            values = await scrape(self._client, self.url)
        except httpx.HTTPStatusError as exc:
            self._error = f"{self.url} answered HTTP {exc.response.status_code}"
            return None
        except httpx.HTTPError as exc:
            self._error = f"{self.url} could not be read: {exc or type(exc).__name__}"
            return None
        for name in GAUGES:
            if name in values:
                self._peak[name] = max(self._peak.get(name, values[name]), values[name])
        return values

    def result(self) -> ServerMetrics:
        if self._error is not None:
            return ServerMetrics(url=self.url, error=self._error)
        start, end = self._start, self._end

        def grew(name: str) -> float | None:
            return end[name] - start[name] if name in start and name in end else None

        count = grew("vllm:time_to_first_token_seconds_count")
        total = grew("vllm:time_to_first_token_seconds_sum")
        return ServerMetrics(
            url=self.url,
            start=start,
            end=end,
            peak=self._peak,
            requests=grew("vllm:request_success_total"),
            ttft_mean_s=total / count if count and total is not None else None,
        )

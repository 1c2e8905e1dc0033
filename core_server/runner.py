"""Run orchestration: expand a benchmark into sessions and drive them over the endpoints.

Each endpoint gets as many worker tasks as its concurrency limit; workers pull sessions from
one shared queue, so sessions spread over replicas and a slow replica simply takes fewer.
All events go through one `EventWriter`. A session's failure never stops the run; an
interrupted run can be resumed: finished sessions are kept, the rest are reset and redone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from adapters.protocol import AdapterConditions
from core_server.benchmark.loader import load_benchmark
from core_server.benchmark.records import Benchmark, ProactiveRecord, QARecord
from core_server.config import PROFILES, EndpointConfig, RunConfig
from core_server.frames import FrameCache, ImageRules, VideoDecodeError, VideoFrames
from core_server.session import SessionDriver, SessionOutcome, SessionPlan
from core_server.store.events import Event, EventKind
from core_server.store.store import Store
from core_server.store.writer import EventWriter
from core_server.timeline import (
    Timeline,
    TimelineError,
    proactive_timeline,
    probe_timeline,
    qa_timeline,
)

ProgressCallback = Callable[[SessionOutcome, int, int], None]


class RunError(Exception):
    """A run that cannot start (bad configuration, unreachable or incompatible adapter)."""


@dataclass
class RunSummary:
    run_id: str
    total: int
    finished: int = 0
    failed: int = 0
    kept: int = 0
    failures: list[SessionOutcome] = field(default_factory=list)


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def select_records(benchmark: Benchmark, config: RunConfig) -> list[QARecord | ProactiveRecord]:
    records = [r for r in benchmark.records if r.task in config.tasks]
    if config.task_types:
        records = [r for r in records if r.task_type in config.task_types]
    return records[: config.limit] if config.limit else records


async def check_endpoint(endpoint: EndpointConfig, config: RunConfig, has_proactive: bool) -> dict:
    """Ask an endpoint's /info and refuse a run whose conditions contradict the profile."""
    try:
        async with httpx.AsyncClient(timeout=config.connect_timeout_s) as client:
            response = await client.get(f"{endpoint.http_base}/info")
            response.raise_for_status()
            info = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise RunError(f"adapter endpoint {endpoint.url} is not reachable: {exc}") from None
    conditions = AdapterConditions.model_validate(info["conditions"])
    conflict = PROFILES[config.profile].conflicts(conditions, has_proactive)
    if conflict:
        raise RunError(f"adapter {info.get('adapter')} at {endpoint.url}: {conflict}")
    return info


class RunExecutor:
    def __init__(
        self,
        config: RunConfig,
        store: Store,
        progress: ProgressCallback | None = None,
    ) -> None:
        self.config = config.resolved()
        self.store = store
        self.progress = progress
        self.profile = PROFILES[self.config.profile]
        self.rules = ImageRules(
            fps=self.config.fps,
            max_width=self.config.max_width,
            jpeg_quality=self.config.jpeg_quality,
        )
        self.cache = FrameCache(Path(self.config.cache_dir) / "frames")

    # ------------------------------------------------------------------ entry points

    async def start(self) -> RunSummary:
        run_id = await self.prepare()
        return await self.execute(run_id)

    async def prepare(self) -> str:
        """Check the benchmark and the endpoints, then store the run and its sessions."""
        benchmark = self._load_benchmark()
        records = select_records(benchmark, self.config)
        if not records:
            raise RunError("the benchmark selection is empty: check --tasks/--task-type/--limit")
        infos = await self._check_endpoints(records)
        run_id = new_run_id()
        self.store.create_run(
            run_id,
            benchmark=f"{benchmark.name}@{benchmark.version}",
            config=self.config.model_dump(mode="json"),
            conditions={"run": self.config.run_conditions().model_dump(), "adapters": infos},
        )
        self.store.add_records(run_id, [r.model_dump(mode="json") for r in records])
        self.store.add_sessions(run_id, [(r.record_id, [r.record_id]) for r in records])
        return run_id

    async def execute(self, run_id: str) -> RunSummary:
        """Run every session of `run_id` that has not ended; ended ones are kept as they are.

        This is both the first execution and a resume: an interrupted session's partial
        events are deleted and the session is redone from its start.
        """
        benchmark = self._load_benchmark()
        by_id = {r.record_id: r for r in benchmark.records}
        stored = self.store.sessions(run_id)
        missing = [rid for s in stored for rid in s.record_ids if rid not in by_id]
        if missing:
            raise RunError(f"run {run_id}: the benchmark has no records {missing[:3]}")
        todo = [s for s in stored if s.status not in ("finished", "failed")]
        records = [by_id[s.record_ids[0]] for s in todo]
        if records:
            await self._check_endpoints(records)
        for session in todo:
            if session.status == "running":
                self.store.reset_session(run_id, session.session_id)
        summary = await self._execute(run_id, benchmark, records)
        summary.total = len(stored)
        summary.kept = len(stored) - len(todo)
        return summary

    def _load_benchmark(self) -> Benchmark:
        cache_dir = Path(self.config.cache_dir)
        return load_benchmark(
            self.config.benchmark,
            cache_dir,
            self.config.benchmark_seed,
            video_root=self.config.video_root,
            subset=self.config.subset,
        )

    # ------------------------------------------------------------------ internals

    async def _check_endpoints(self, records: list) -> list[dict]:
        has_proactive = any(r.task == "proactive" for r in records)
        checks = [check_endpoint(e, self.config, has_proactive) for e in self.config.endpoints]
        return list(await asyncio.gather(*checks))

    async def _execute(self, run_id: str, benchmark: Benchmark, records: list) -> RunSummary:
        summary = RunSummary(run_id=run_id, total=len(records))
        self.store.set_run_status(run_id, "running")
        writer = EventWriter(self.store)
        await writer.start()
        queue: asyncio.Queue = asyncio.Queue()
        for record in records:
            queue.put_nowait(record)
        video_root = Path(benchmark.video_root)

        async def worker(endpoint: EndpointConfig) -> None:
            while True:
                try:
                    record = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                outcome = await self._run_session(run_id, record, video_root, endpoint, writer)
                if outcome.status == "finished":
                    summary.finished += 1
                else:
                    summary.failed += 1
                    summary.failures.append(outcome)
                if self.progress is not None:
                    self.progress(outcome, summary.finished + summary.failed, summary.total)

        workers = [
            asyncio.create_task(worker(endpoint))
            for endpoint in self.config.endpoints
            for _ in range(endpoint.concurrency)
        ]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            await writer.close()
            self.store.set_run_status(run_id, "interrupted")
            raise
        await writer.close()
        self.store.set_run_status(run_id, "finished")
        return summary

    async def _run_session(
        self,
        run_id: str,
        record: QARecord | ProactiveRecord,
        video_root: Path,
        endpoint: EndpointConfig,
        writer: EventWriter,
    ) -> SessionOutcome:
        session_id = record.record_id
        writer.put_session_status(run_id, session_id, "running", endpoint=endpoint.url)
        try:
            frames = await self.cache.aget(video_root / record.video_path, self.rules)
            timeline = self._timeline(record, frames)
        except (VideoDecodeError, TimelineError) as exc:
            outcome = SessionOutcome(session_id, "failed", "frames", str(exc))
            failed = {"stage": "frames", "reason": str(exc)}
            now = time.monotonic_ns()
            writer.put(Event(run_id, session_id, 0, EventKind.SESSION_FAILED, now, None, failed))
        else:
            plan = SessionPlan(run_id, session_id, record, timeline, frames)
            driver = SessionDriver(
                plan,
                endpoint_url=endpoint.url,
                conditions=self.config.run_conditions(),
                profile=self.profile,
                response_timeout_s=self.config.response_timeout_s,
                connect_timeout_s=self.config.connect_timeout_s,
                sink=writer.put,
            )
            outcome = await driver.run()
        writer.put_session_status(
            run_id, session_id, outcome.status, stage=outcome.stage, reason=outcome.reason
        )
        return outcome

    def _timeline(self, record: QARecord | ProactiveRecord, frames: VideoFrames) -> Timeline:
        if isinstance(record, QARecord):
            return qa_timeline(
                record, frames, self.config.qa_history_s, with_steps=self.profile.frame_level_steps
            )
        if self.profile.probe_questions and record.probes:
            return probe_timeline(record, frames)
        return proactive_timeline(
            record,
            frames,
            lead_s=self.config.proactive_lead_s,
            tolerance_s=self.config.proactive_tolerance_s,
            steps_before_instruction=self.profile.frame_level_steps,
        )

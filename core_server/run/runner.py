"""Run orchestration: expand a benchmark into sessions and drive them over the endpoints.

The run's sessions wait in the store; one in-process `Worker` (core_server/run/worker.py) gives
each endpoint as many slots as its concurrency limit, and the slots claim sessions from the
store, so sessions spread over replicas and a slow replica simply takes fewer. Workers in
other processes (`streameval worker`) may claim sessions of the same run. A session's
failure never stops the run; an interrupted run can be resumed: finished and failed
sessions are kept, the rest are reset and redone (with `retry_failed`, sessions that failed
for infrastructure reasons are redone too).
A resume refuses endpoints that serve another adapter identity than the run used, unless
`allow_adapter_change`; every identity a run used is listed in `runs.conditions["adapters"]`.

Before its sessions start, a run extracts the frames of every video they use into the frame
cache. `progress` (streameval/progress.py) hears of each phase: the synthetic benchmark
generated, the frames prepared, the sessions streamed.

The run ends `finished`, or `failed` when every one of its sessions failed; `RunSummary.
exit_code` is what `streameval run` exits with (0 all finished, 1 some failed, 3 all failed).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord
from streameval.core.config import PROTOCOL_PROFILES, EndpointConfig, RunConfig
from streameval.core.errors import CoreError
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import FramesError
from streameval.core.frames.types import ImageRules, VideoFrames
from streameval.core.run.adapter_identity import adapter_identity, identity_label
from streameval.core.run.endpoint_health import EndpointsGone
from streameval.core.run.exit_codes import EXIT_ALL_FAILED, EXIT_FINISHED, EXIT_SOME_FAILED
from streameval.core.run.inputs import check_records, create_run, records_diff
from streameval.core.run.perturb_records import Perturbed, robustness_condition, streamed_records
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S, DEFAULT_LEASE_S
from streameval.core.run.worker import (
    Worker,
    WorkerSummary,
    finish_run_if_done,
    this_worker,
)
from streameval.core.session.driver import SessionDriver, SessionOutcome
from streameval.core.session.failures import FailureStage
from streameval.core.session.protocol_state import ResponseLimits
from streameval.core.session.readiness import (
    AdapterNotReady,
    Notice,
    stderr_notice,
    wait_until_ready,
)
from streameval.core.store.locations import default_cache_dir
from streameval.core.store.models import RunStatus
from streameval.core.store.queue import WorkerIdentity
from streameval.core.store.run_lease import (
    StoreFile,
    StoreFileGone,
    acquire_run,
    held_elsewhere,
    release_run,
    renew_run,
)
from streameval.core.store.store import SessionInfo, Store, StoreError, StoreLost
from streameval.core.store.writer import EventWriter
from streameval.core.streams.perturb import perturb
from streameval.core.streams.plan import SessionPlan
from streameval.core.streams.timeline import (
    Timeline,
    proactive_timeline,
    probe_timeline,
    qa_timeline,
)
from streameval.events import Event, EventKind, FailureCause, failure_cause
from streameval.progress import NO_PROGRESS, Phase, Progress
from streameval.protocol import AdapterConditions
from streameval.variants import CONDITION_KEY

# The adapter's /info must arrive whole within this time and be at most this long.
INFO_TIMEOUT_S = 30.0
INFO_MAX_BYTES = 1024 * 1024

# How often a running Core checks that its SQLite store file is still the one it opened.
STORE_CHECK_S = 1.0

# Videos whose frames are extracted at once before the sessions start (each decode also
# uses every core).
FRAME_PREPARERS = 4


class RunError(CoreError):
    """A run that cannot start (bad configuration, unreachable or incompatible adapter)."""


class EndpointUnusable(RunError):
    """An endpoint that cannot be used: unreachable, not ready, or its /info unusable (not a
    conflict between its conditions and the profile)."""


class RunTakenOver(CoreError):
    """Another Core took this run over (this one stalled past its lease): stop without
    touching the run, which is the other Core's now."""


class RunStopped(CoreError):
    """A run that stopped part-way: every endpoint gone (the run is `interrupted`), the
    store failed (`failed`, where the store still took that), or another Core took it."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id


@dataclass
class RunSummary:
    """One execution of a run. `finished`/`failed` count the sessions run this time, `kept`
    those left as they were, `retried` the failed ones redone; `status` and `failed_total`
    describe the whole run afterwards (kept sessions included)."""

    run_id: str
    total: int
    finished: int = 0
    failed: int = 0
    kept: int = 0
    retried: int = 0
    status: RunStatus = "finished"
    failed_total: int = 0
    failures: list[SessionOutcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.failed_total == 0:
            return EXIT_FINISHED
        return EXIT_ALL_FAILED if self.status == "failed" else EXIT_SOME_FAILED


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def select_records(benchmark: Benchmark, config: RunConfig) -> list[QARecord | ProactiveRecord]:
    records = [r for r in benchmark.records if r.task in config.tasks]
    if config.task_types:
        records = [r for r in records if r.task_type in config.task_types]
    return records[: config.limit] if config.limit else records


async def check_endpoint(
    endpoint: EndpointConfig,
    config: RunConfig,
    has_proactive: bool,
    notice: Notice | None = stderr_notice,
    info_timeout_s: float = INFO_TIMEOUT_S,
) -> dict:
    """Wait until the endpoint is ready (a loading model: /healthz 503), ask its /info and
    refuse a run whose conditions contradict the profile."""
    try:
        async with httpx.AsyncClient(timeout=config.connect_timeout_s) as client:
            await wait_until_ready(
                endpoint.url, config.adapter_ready_timeout_s, client=client, notice=notice
            )
            info = await fetch_info(client, endpoint, info_timeout_s)
    except AdapterNotReady as exc:
        raise EndpointUnusable(str(exc)) from None
    except (httpx.HTTPError, ValueError) as exc:
        raise EndpointUnusable(f"adapter endpoint {endpoint.url} is not reachable: {exc}") from None
    try:
        conditions = AdapterConditions.model_validate(info["conditions"])
    except (KeyError, TypeError, ValueError) as exc:
        problem = "has no conditions" if isinstance(exc, KeyError) else "has invalid conditions"
        raise EndpointUnusable(f"adapter endpoint {endpoint.url}: its /info {problem}") from None
    conflict = PROTOCOL_PROFILES[config.profile].conflicts(conditions, has_proactive)
    if conflict:
        raise RunError(f"adapter {info.get('adapter')} at {endpoint.url}: {conflict}")
    return info


async def fetch_info(
    client: httpx.AsyncClient, endpoint: EndpointConfig, timeout_s: float = INFO_TIMEOUT_S
) -> dict:
    """The endpoint's /info as a JSON object, read within `timeout_s` in all (the client's
    timeout is per read: a reply trickling a byte at a time would never end) and at most
    INFO_MAX_BYTES long (a huge reply must not take the Core's memory)."""
    url = f"{endpoint.http_base}/info"
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url) as response:
                response.raise_for_status()
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > INFO_MAX_BYTES:
                    raise EndpointUnusable(
                        _info_too_big(endpoint, f"{int(declared)} bytes declared")
                    )
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > INFO_MAX_BYTES:
                        raise EndpointUnusable(_info_too_big(endpoint, "more"))
    except TimeoutError:
        raise EndpointUnusable(
            f"adapter endpoint {endpoint.url}: /info did not answer completely within "
            f"{timeout_s:g}s"
        ) from None
    try:
        info = json.loads(body)
    except ValueError:
        raise EndpointUnusable(f"adapter endpoint {endpoint.url}: /info is not JSON") from None
    if not isinstance(info, dict):
        raise EndpointUnusable(f"adapter endpoint {endpoint.url}: /info is not a JSON object")
    return info


def _info_too_big(endpoint: EndpointConfig, size: str) -> str:
    return (
        f"adapter endpoint {endpoint.url}: /info is larger than its limit of "
        f"{INFO_MAX_BYTES} bytes ({size})"
    )


def identity_differences(used: dict, new: dict) -> list[str]:
    """`field old -> new` for each field of the identity that differs."""
    old, now = adapter_identity(used), adapter_identity(new)
    changes = [
        f"{key} {old[key]} -> {now[key]}"
        for key in ("adapter", "adapter_version")
        if old[key] != now[key]
    ]
    keys = list(old["conditions"]) + [k for k in now["conditions"] if k not in old["conditions"]]
    for key in keys:
        before, after = old["conditions"].get(key), now["conditions"].get(key)
        if before != after:
            changes.append(f"conditions.{key} {before} -> {after}")
    return changes


def session_failure_cause(session: SessionInfo) -> str | None:
    """A failed session's cause; derived from its stage for sessions stored before the Core
    recorded causes."""
    if session.status != "failed":
        return None
    if session.failure_cause is not None:
        return session.failure_cause
    return failure_cause({"stage": session.failure_stage, "reason": session.failure_reason})


class RunExecutor:
    def __init__(
        self,
        config: RunConfig,
        store: Store,
        progress: Progress = NO_PROGRESS,
        *,
        identity: WorkerIdentity | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        give_up_s: float = ALL_DOWN_GIVE_UP_S,
    ) -> None:
        self.config = config.resolved()
        self.store = store
        self.progress = progress
        self.identity = identity
        self.lease_s = lease_s
        self.give_up_s = give_up_s
        self._benchmark: Benchmark | None = None
        self._by_id: dict[str, QARecord | ProactiveRecord] | None = None
        # A robustness run's perturbation copies: record id -> variant and base record.
        self._perturbed: dict[str, Perturbed] = {}
        # Where "waiting for adapter ..." progress lines go (None: nowhere).
        self.notice: Notice | None = stderr_notice
        # Endpoints the last check found unusable (url -> why): the run starts without them.
        self.left_out: dict[str, str] = {}
        self._allow_adapter_change = False
        self.profile = PROTOCOL_PROFILES[self.config.profile]
        self.rules = ImageRules(
            fps=self.config.fps,
            max_width=self.config.max_width,
            jpeg_quality=self.config.jpeg_quality,
        )
        self.cache = FrameCache(
            Path(self.config.cache_dir) / "frames", verify=self.config.verify_video_digests
        )

    # ------------------------------------------------------------------ entry points

    async def start(self) -> RunSummary:
        run_id = await self.prepare()
        return await self.execute(run_id)

    async def prepare(self) -> str:
        """Check the benchmark and the endpoints, then store the run and its sessions, all
        in one transaction: a run that exists has every one of its sessions."""
        benchmark = self._load_benchmark()
        self._benchmark, self._by_id = benchmark, None  # executing it next needs no reload
        selected = select_records(benchmark, self.config)
        if not selected:
            raise RunError("the benchmark selection is empty: check --tasks/--task-type/--limit")
        # A robustness run streams each record again per variant (perturb_records.py).
        records = streamed_records(selected, self.config, benchmark.records).records
        dumped = [r.model_dump(mode="json") for r in records]
        check_records(dumped)  # before the endpoints are asked: bad input is found at once
        infos = await self._check_endpoints(records)
        adapters = [
            {**info, "endpoint": endpoint.url}
            for endpoint, info in zip(self.config.endpoints, infos, strict=True)
            if info is not None  # left out of rotation: its identity is not known yet
        ]
        conditions = {"run": self.config.run_conditions().model_dump(), "adapters": adapters}
        robustness = robustness_condition(self.config)
        if robustness is not None:
            conditions[CONDITION_KEY] = robustness.model_dump()
        run_id = new_run_id()
        create_run(
            self.store,
            run_id,
            benchmark=f"{benchmark.name}@{benchmark.version}",
            config=self.config.model_dump(mode="json"),
            conditions=conditions,
            records=dumped,
        )
        return run_id

    async def execute(
        self, run_id: str, *, retry_failed: bool = False, allow_adapter_change: bool = False
    ) -> RunSummary:
        """Run every session of `run_id` that has not ended; ended ones are kept as they are.

        This is both the first execution and a resume: an interrupted session's partial
        events are deleted and the session is redone from its start (a new attempt). With
        `retry_failed`, sessions that failed for infrastructure reasons are redone the same
        way; other failures are final. An endpoint serving another adapter identity than the
        run used is refused (RunError) unless `allow_adapter_change`, which records it.

        The run is owned by this executor meanwhile (store/run_lease.py): a run another
        live Core owns is refused (RunOwned), one whose owner died is taken over.
        """
        if self.identity is None:
            self.identity = this_worker()
        identity = self.identity
        acquire = functools.partial(acquire_run, self.store, run_id, identity, self.lease_s)
        await asyncio.to_thread(self.store.retrying, acquire)
        try:
            return await self._execute_owned(run_id, retry_failed, allow_adapter_change)
        finally:
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(release_run, self.store, run_id, identity)

    async def _execute_owned(
        self, run_id: str, retry_failed: bool, allow_adapter_change: bool
    ) -> RunSummary:
        stored = self.store.sessions(run_id)
        if not stored:
            raise RunError(
                f"run {run_id} has no sessions: its creation did not complete, so there is "
                "nothing to resume; start a new run"
            )
        by_id = self._records_by_id()  # a robustness run's variant records included
        assert self._benchmark is not None
        benchmark = self._benchmark
        self._check_inputs(run_id, benchmark)
        retry = {
            s.session_id
            for s in stored
            if retry_failed and session_failure_cause(s) == FailureCause.INFRASTRUCTURE
        }
        todo = [
            s for s in stored if s.status not in ("finished", "failed") or s.session_id in retry
        ]
        records = [by_id[s.record_ids[0]] for s in todo]
        if records:
            infos = await self._check_endpoints(records)
            self._check_identities(run_id, infos, allow_adapter_change)
        now = datetime.now(UTC)
        for session in todo:
            # Running when the Core died, or retried; one a scale-out worker holds under a
            # live lease is left to it.
            if session.status != "pending" and not held_elsewhere(session, self.identity, now):
                self.store.reset_session(run_id, session.session_id)
        summary = await self._execute(run_id, benchmark, records)
        summary.total = len(stored)
        summary.kept = len(stored) - len(todo)
        summary.retried = len(retry)
        return summary

    def _check_inputs(self, run_id: str, benchmark: Benchmark) -> None:
        """Refuse a benchmark whose records differ from those the run stored: the model
        would be asked one question and scored against another."""
        stored = self.store.records(run_id)
        current = {r.record_id: r.model_dump(mode="json") for r in benchmark.records}
        streamed = streamed_records(
            select_records(benchmark, self.config), self.config, benchmark.records
        ).records
        current.update((r.record_id, r.model_dump(mode="json")) for r in streamed)
        diff = records_diff(stored, current, [r.record_id for r in streamed])
        if diff is not None:
            raise RunError(
                f"run {run_id}: the benchmark {self.config.benchmark} changed since the run "
                f"was created ({diff}); resume with the file the run was created from, or "
                "start a new run"
            )

    async def admit(self, run_id: str, allow_adapter_change: bool = False) -> None:
        """Check this executor's endpoints against the run before working on it: reachable,
        serving what its tasks need, and the adapter identity the run used (RunError)."""
        by_id = self._records_by_id()
        assert self._benchmark is not None
        self._check_inputs(run_id, self._benchmark)
        wanted = {rid for session in self.store.sessions(run_id) for rid in session.record_ids}
        infos = await self._check_endpoints([by_id[rid] for rid in wanted if rid in by_id])
        self._check_identities(run_id, infos, allow_adapter_change)

    def _records_by_id(self) -> dict[str, QARecord | ProactiveRecord]:
        """The benchmark's records by id, and a robustness run's variant records (derived
        again from the configuration), loaded and indexed once per executor."""
        if self._benchmark is None:
            self._benchmark = self._load_benchmark()
        if self._by_id is None:
            benchmark = self._benchmark
            streamed = streamed_records(
                select_records(benchmark, self.config), self.config, benchmark.records
            )
            self._by_id = {r.record_id: r for r in (*benchmark.records, *streamed.records)}
            self._perturbed = streamed.perturbed
        return self._by_id

    def _load_benchmark(self) -> Benchmark:
        cache_dir = Path(self.config.cache_dir)
        return load_benchmark(
            self.config.benchmark,
            cache_dir,
            self.config.benchmark_seed,
            video_root=self.config.video_root,
            subset=self.config.subset,
            progress=self.progress,
        )

    # ------------------------------------------------------------------ internals

    async def _check_endpoints(self, records: list) -> list[dict | None]:
        """Each endpoint's /info, None for one that cannot be used now (unreachable, not
        ready, a bad /info): the run starts without it, out of rotation and re-probed
        (`left_out`), as long as one endpoint is usable; with none, the first one's error
        refuses the run. A profile conflict refuses it whatever the others say. A run made
        with no endpoints (`run --detach`, workers bring theirs) checks nothing here."""
        has_proactive = any(r.task == "proactive" for r in records)
        checks = [
            check_endpoint(e, self.config, has_proactive, self.notice)
            for e in self.config.endpoints
        ]
        results = await asyncio.gather(*checks, return_exceptions=True)
        for result in results:  # a conflict, a bug, a cancellation: not an unusable replica
            if isinstance(result, BaseException) and not isinstance(result, EndpointUnusable):
                raise result
        unusable = [r for r in results if isinstance(r, EndpointUnusable)]
        if unusable and len(unusable) == len(results):
            raise unusable[0]
        self.left_out = {
            endpoint.url: str(result)
            for endpoint, result in zip(self.config.endpoints, results, strict=True)
            if isinstance(result, EndpointUnusable)
        }
        return [None if isinstance(r, EndpointUnusable) else r for r in results]

    async def _admit_late(self, run_id: str, endpoint: EndpointConfig, has_proactive: bool) -> None:
        """The checks an endpoint left out at start passes before it first joins: the same
        as at start (its /info, the profile, the adapter identity the run uses)."""
        info = await check_endpoint(endpoint, self.config, has_proactive, None)
        infos = [info if e.url == endpoint.url else None for e in self.config.endpoints]
        await asyncio.to_thread(self._check_identities, run_id, infos, self._allow_adapter_change)

    def _check_identities(self, run_id: str, infos: list[dict | None], allow_change: bool) -> None:
        """Refuse endpoints whose adapter identity the run has not used (unless allowed);
        record every (identity, endpoint) pair the run now uses in its conditions."""
        self._allow_adapter_change = allow_change
        run = self.store.get_run(run_id)
        conditions = dict(run.conditions)
        used: list[dict] = list(conditions.get("adapters") or [])
        known = [adapter_identity(info) for info in used]
        added: list[dict] = []
        for endpoint, info in zip(self.config.endpoints, infos, strict=True):
            if info is None:  # left out of rotation at start: nothing to compare yet
                continue
            identity = adapter_identity(info)
            if used and identity not in known and not allow_change:
                changes = identity_differences(used[-1], info)
                raise RunError(
                    f"run {run_id} used adapter {identity_label(used[-1])} but {endpoint.url} "
                    f"serves {identity_label(info)} ({', '.join(changes)}); pass "
                    "--allow-adapter-change to resume with a different adapter on purpose"
                )
            entry = {**info, "endpoint": endpoint.url}
            pairs = [(adapter_identity(u), u.get("endpoint")) for u in used + added]
            if (identity, endpoint.url) not in pairs:
                added.append(entry)
        if added:
            conditions["adapters"] = used + added
            self.store.update_run_conditions(run_id, conditions)

    async def _execute(self, run_id: str, benchmark: Benchmark, records: list) -> RunSummary:
        summary = RunSummary(run_id=run_id, total=len(records))
        self.store.set_run_status(run_id, "running")
        self._benchmark, self._by_id = benchmark, None

        def report(outcome: SessionOutcome, _progress: WorkerSummary) -> None:
            if outcome.status == "finished":
                summary.finished += 1
            else:
                summary.failed += 1
                summary.failures.append(outcome)
                self.progress.warn(
                    f"session {outcome.session_id} failed ({outcome.stage}, {outcome.cause}): "
                    f"{outcome.reason}"
                )
            self.progress.advance(Phase.SESSIONS, summary.finished + summary.failed, summary.failed)

        worker = Worker(
            self.store,
            self.config.endpoints,
            self._this_runner,
            identity=self.identity,
            lease_s=self.lease_s,
            progress=report,
            give_up_s=self.give_up_s,
            notice=self.notice,
        )
        has_proactive = any(r.task == "proactive" for r in records)
        for endpoint in self.config.endpoints:
            if endpoint.url in self.left_out:
                # Unusable at start: out of rotation from the first claim, re-probed with
                # backoff like a replica lost mid-run (the pool's notice names it and why);
                # it joins only once its /info, profile and adapter identity pass.
                admission = functools.partial(self._admit_late, run_id, endpoint, has_proactive)
                worker.health.mark_down(endpoint.url, self.left_out[endpoint.url], admission)
        try:
            await self._work_watched(run_id, self._prepare_and_stream(run_id, worker, records))
        except EndpointsGone as exc:
            self.store.set_run_status(run_id, "interrupted")
            left = sum(s.status == "pending" for s in self.store.sessions(run_id))
            raise RunStopped(
                f"run {run_id} stopped: {exc}; it is interrupted with {left} sessions not "
                f"run: resume it with `streameval run --resume {run_id}` once an adapter is back",
                run_id,
            ) from None
        except RunTakenOver:
            raise  # the run is the other Core's now: its status is not ours to set
        except StoreError as exc:
            marked = "marked failed"
            try:
                if isinstance(exc, StoreFileGone | StoreLost) or getattr(exc, "lost", False):
                    raise exc  # writing to the unlinked file would only pretend to mark it
                if not renew_run(self.store, run_id, self.identity, self.lease_s):
                    marked = "left to the Core that took it over"
                else:
                    self.store.set_run_status(run_id, "failed")
            except StoreError:
                marked = "not marked (the store takes no writes)"
            raise RunStopped(
                f"run {run_id} stopped: the store failed: {exc}; the run is {marked}", run_id
            ) from None
        except BaseException:
            with contextlib.suppress(StoreError):
                self.store.set_run_status(run_id, "interrupted")
            raise
        # The run's status comes from all of its sessions, those kept from before included
        # (still `running` only while workers elsewhere hold some of them).
        summary.status = finish_run_if_done(self.store, run_id) or "running"
        summary.failed_total = sum(s.status == "failed" for s in self.store.sessions(run_id))
        return summary

    async def _prepare_and_stream(self, run_id: str, worker: Worker, records: list) -> None:
        await self._prepare_frames(records)
        self.progress.start(Phase.SESSIONS, len(records))
        await worker.run(run_id)
        self.progress.finish(Phase.SESSIONS)

    async def _prepare_frames(self, records: list) -> None:
        """Extract the frames of every video the records use into the frame cache before the
        sessions start (Phase.FRAMES), a few videos at once; a cached video costs a lookup.
        A video whose frames cannot be made is left to its sessions, which fail at stage
        `frames` with its error."""
        assert self._benchmark is not None
        root = Path(self._benchmark.video_root)
        names = sorted({record.video_path for record in records})
        if not names:
            return
        phase = _FramesPhase(self.progress, len(names))
        slots = asyncio.Semaphore(FRAME_PREPARERS)

        async def prepare(name: str) -> None:
            async with slots:
                if not await self._frames_cached(root / name):
                    phase.show()
                    await self._extract_frames(root, name)
            phase.one_done()

        await asyncio.gather(*(prepare(name) for name in names))
        phase.end()

    async def _extract_frames(self, root: Path, name: str) -> None:
        """Fill the frame cache for one video, telling `progress` how far a long one is."""
        loop = asyncio.get_running_loop()
        reported: list[float] = []

        def decoded(done_s: float, total_s: float) -> None:  # in the decoding thread
            reported.append(total_s)
            loop.call_soon_threadsafe(self.progress.item, Phase.FRAMES, name, done_s, total_s)

        with contextlib.suppress(FramesError):
            await self.cache.aget(root / name, self.rules, decoded)
        if reported:  # its line goes
            self.progress.item(Phase.FRAMES, name, reported[-1], reported[-1])

    async def _frames_cached(self, video: Path) -> bool:
        try:
            return await asyncio.to_thread(self.cache.has, video, self.rules)
        except FramesError:
            return False  # preparing it fails too, and its sessions say why

    async def _work_watched(self, run_id: str, work_to_do: Coroutine[None, None, None]) -> None:
        """Do the work while renewing the run's lease and checking the store file; a lost
        lease or a vanished store stops the work."""
        work = asyncio.create_task(work_to_do, name="streameval-run")
        watch = asyncio.create_task(self._watch(run_id), name="streameval-run-watch")
        try:
            await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            work.cancel()
            watch.cancel()
            await asyncio.gather(work, watch, return_exceptions=True)
            raise
        if not work.done():  # the watch found a problem: stop the sessions, report it
            work.cancel()
            await asyncio.gather(work, return_exceptions=True)
            watch.result()
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        work.result()
        self._check_store_file()  # a store deleted in the last second loses the run too

    async def _watch(self, run_id: str) -> None:
        assert self.identity is not None
        self._store_file = StoreFile.of(self.store)
        renew_every = self.lease_s / 3
        next_renew = time.monotonic() + renew_every
        while True:
            await asyncio.sleep(min(STORE_CHECK_S, renew_every))
            self._check_store_file()
            if time.monotonic() < next_renew:
                continue
            next_renew = time.monotonic() + renew_every
            try:
                held = await asyncio.to_thread(
                    renew_run, self.store, run_id, self.identity, self.lease_s
                )
            except StoreError:
                continue  # a store that blinked; the writer reports one that stays down
            if not held:
                raise RunTakenOver(
                    f"run {run_id} stopped here: another Core took it over (this Core stalled "
                    f"past its {self.lease_s:g}s lease)"
                )

    def _check_store_file(self) -> None:
        check_present = getattr(self.store, "check_present", None)
        if check_present is not None:  # the store checks its own file (StoreLost)
            check_present()
            return
        store_file = getattr(self, "_store_file", None)
        if store_file is not None:
            store_file.check()

    async def _this_runner(self, _run_id: str) -> RunExecutor:
        return self

    async def run_claimed(
        self, session: SessionInfo, endpoint: EndpointConfig, writer: EventWriter
    ) -> SessionOutcome:
        """Run one session a worker claimed (its status is already `running`)."""
        by_id = self._records_by_id()
        missing = [rid for rid in session.record_ids if rid not in by_id]
        if missing:
            raise RunError(f"run {session.run_id}: the benchmark has no records {missing[:3]}")
        record = by_id[session.record_ids[0]]
        video_root = Path(self._benchmark.video_root)
        return await self._run_session(session.run_id, record, video_root, endpoint, writer)

    async def _run_session(
        self,
        run_id: str,
        record: QARecord | ProactiveRecord,
        video_root: Path,
        endpoint: EndpointConfig,
        writer: EventWriter,
    ) -> SessionOutcome:
        session_id = record.record_id
        try:
            frames = await self.cache.aget(video_root / record.video_path, self.rules)
            timeline = self._timeline(record, frames)
        except FramesError as exc:  # VideoDecodeError, FrameCacheError, TimelineError
            stage = FailureStage.FRAMES.value
            cause = exc.cause  # input for the video/timeline, infrastructure for the cache
            outcome = SessionOutcome(session_id, "failed", stage, str(exc), cause)
            failed = {"stage": stage, "reason": str(exc), "cause": cause}
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
                ready_timeout_s=self.config.adapter_ready_timeout_s,
                sink=writer.put_row,
                response_limits=ResponseLimits(
                    self.config.max_response_deltas,
                    self.config.max_response_bytes,
                    self.config.max_session_events,
                ),
            )
            outcome = await driver.run()
            if outcome.before_first_task:
                return outcome  # the worker retries it elsewhere or records the failure
        writer.put_session_status(
            run_id,
            session_id,
            outcome.status,
            stage=outcome.stage,
            reason=outcome.reason,
            cause=outcome.cause,
            adapter=outcome.adapter,
        )
        return outcome

    def _timeline(self, record: QARecord | ProactiveRecord, frames: VideoFrames) -> Timeline:
        timeline = self._clean_timeline(record, frames)
        perturbed = self._perturbed.get(record.record_id)
        if perturbed is None:
            return timeline
        seed = self.config.perturb_seed
        return perturb(timeline, perturbed.variant, seed, perturbed.base_record_id)

    def _clean_timeline(self, record: QARecord | ProactiveRecord, frames: VideoFrames) -> Timeline:
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


@dataclass
class _FramesPhase:
    """Phase.FRAMES, shown only once a video needs extracting: when every video was cached,
    the phase is one `cached` line instead of a bar."""

    progress: Progress
    total: int
    done: int = 0
    shown: bool = False

    def show(self) -> None:
        if not self.shown:
            self.shown = True
            self.progress.start(Phase.FRAMES, self.total)
            if self.done:  # cached videos checked before this one
                self.progress.advance(Phase.FRAMES, self.done)

    def one_done(self) -> None:
        self.done += 1
        if self.shown:
            self.progress.advance(Phase.FRAMES, self.done)

    def end(self) -> None:
        if self.shown:
            self.progress.finish(Phase.FRAMES)
        else:
            self.progress.cached(Phase.FRAMES, self.total)


def stored_config(store: Store, run_id: str) -> RunConfig:
    """The configuration a run was created with, to resume it or work on it (RunError for
    a run that streams no benchmark: a capacity search is a series of runs of its own)."""
    config = store.get_run(run_id).config
    kind = config.get("kind")
    if kind is not None:
        raise RunError(
            f"run {run_id} is a {str(kind).replace('_', ' ')}, not a benchmark run: it cannot "
            "be resumed or worked on (start it again)"
        )
    return RunConfig.model_validate(config)


async def stored_run_executor(
    store: Store,
    run_id: str,
    endpoint: EndpointConfig,
    *,
    cache_dir: Path | None = None,
    video_root: Path | None = None,
    identity: WorkerIdentity | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    allow_adapter_change: bool = False,
) -> RunExecutor:
    """An executor for a worker joining a stored run: the run's own configuration, with this
    machine's endpoint, frame cache and (if given) video folder, admitted to the run."""
    stored = stored_config(store, run_id)
    local = {"endpoints": [endpoint], "cache_dir": str(cache_dir or default_cache_dir())}
    if video_root is not None:
        local["video_root"] = str(video_root)
    executor = RunExecutor(
        stored.model_copy(update=local), store, identity=identity, lease_s=lease_s
    )
    await executor.admit(run_id, allow_adapter_change)
    return executor

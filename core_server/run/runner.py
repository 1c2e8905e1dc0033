"""Run orchestration: a benchmark run created, then its sessions driven over the endpoints.

The run's sessions wait in the store; one in-process `Worker` (core_server/run/worker.py) gives
each endpoint as many slots as its concurrency limit, and the slots claim sessions from the
store, so sessions spread over replicas and a slow replica simply takes fewer. Workers in
other processes (`streameval worker`) may claim sessions of the same run. A session's
failure never stops the run; an interrupted run can be resumed: finished and failed
sessions are kept, the rest are reset and redone (sessions_to_run.py).

`RunExecutor` dispatches the sessions a worker claims and composes the rest of a run:
its records (run_records.py, run_creation.py), the videos' bytes it is bound to
(video_binding.py), the endpoints it admits (endpoint_admission.py), its lease
(lease_keeping.py), the frames prepared while the sessions stream (frame_preparation.py),
its phases as `progress` shows them (run_progress.py) and how it ends (run_end.py:
RunSummary, the exit code, RunStopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path

from streameval.core.benchmark.records import Benchmark
from streameval.core.config import PROTOCOL_PROFILES, EndpointConfig, RunConfig
from streameval.core.frames.audio_track import AudioTrack, audio_track
from streameval.core.frames.cache import FrameCache
from streameval.core.frames.errors import FramesError
from streameval.core.frames.types import ImageRules
from streameval.core.run.adapter_identity import hello_mismatch
from streameval.core.run.decoding_ahead import OwnDecodes
from streameval.core.run.endpoint_admission import EndpointAdmission
from streameval.core.run.errors import RunError
from streameval.core.run.frame_preparation import FramePreparation
from streameval.core.run.lease_keeping import RunLease
from streameval.core.run.perturb_records import Record
from streameval.core.run.run_creation import store_new_run
from streameval.core.run.run_end import RunSummary, await_run_work, close_summary
from streameval.core.run.run_progress import SessionsPhase
from streameval.core.run.run_records import RunRecords
from streameval.core.run.session_timeline import expected_stream_s, session_timeline
from streameval.core.run.sessions_to_run import reset_started, sessions_to_run
from streameval.core.run.timeouts import ALL_DOWN_GIVE_UP_S, DEFAULT_LEASE_S
from streameval.core.run.video_binding import VideoBinding, creation_digests
from streameval.core.run.worker import Worker, this_worker
from streameval.core.session.driver import SessionDriver, SessionOutcome
from streameval.core.session.failures import FailureStage
from streameval.core.session.protocol_state import ResponseLimits
from streameval.core.session.readiness import Notice, stderr_notice
from streameval.core.store.locations import default_cache_dir
from streameval.core.store.queue import SessionQueue, WorkerIdentity
from streameval.core.store.store import SessionInfo, Store
from streameval.core.store.writer import EventWriter
from streameval.core.streams.plan import SessionPlan
from streameval.events import Event, EventKind
from streameval.progress import NO_PROGRESS, Progress

# Wall-clock sessions start over at most this long (STARTS_PER_S_MIN a second or more):
# thousands connecting and sending their first frames at once made a loaded machine's
# frames 0.5 s late for the run's first 20 s (BENCHMARKS.md).
START_WINDOW_S = 10.0
STARTS_PER_S_MIN = 50.0


def start_rate_for(concurrency: int) -> float:
    """Sessions started per second under wall-clock pacing, by default."""
    return max(STARTS_PER_S_MIN, concurrency / START_WINDOW_S)


class RunExecutor:
    """Creates a benchmark run (`prepare`), executes or resumes it (`execute`) and runs each
    session a worker claims of it (`run_claimed`)."""

    def __init__(
        self,
        config: RunConfig,
        store: Store,
        progress: Progress = NO_PROGRESS,
        *,
        identity: WorkerIdentity | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        give_up_s: float = ALL_DOWN_GIVE_UP_S,
        benchmark: Benchmark | None = None,
        start_rate: float | None = None,
    ) -> None:
        """`start_rate`: sessions started per second under wall-clock pacing, so that
        thousands do not connect at once (None: start_rate_for(concurrency))."""
        self.config = config.resolved()
        self.store = store
        self.progress = progress
        self.identity = identity
        self.lease_s = lease_s
        self.give_up_s = give_up_s
        self.start_rate = start_rate
        self.records = RunRecords(self.config, progress, benchmark)
        self.admission = EndpointAdmission(self.config, store)
        # Where "waiting for adapter ..." progress lines go (None: nowhere).
        self.notice: Notice | None = stderr_notice
        self.profile = PROTOCOL_PROFILES[self.config.profile]
        self.rules = ImageRules(
            fps=self.config.fps,
            max_width=self.config.max_width,
            jpeg_quality=self.config.jpeg_quality,
        )
        self.cache = FrameCache(
            Path(self.config.cache_dir) / "frames", verify=self.config.verify_video_digests
        )
        self._videos: dict[str, VideoBinding] = {}  # by run id
        self._own_decodes = OwnDecodes()

    # ------------------------------------------------------------------ entry points

    async def start(self) -> RunSummary:
        run_id = await self.prepare()
        return await self.execute(run_id)

    async def prepare(self) -> str:
        """Check the benchmark and the endpoints, then store the run and its sessions, all
        in one transaction: a run that exists has every one of its sessions."""
        records, stored_form = self.records.for_new_run()  # executing it next needs no reload
        self._resolve_modalities(records)
        infos = await self.admission.check_endpoints(records, self.notice)
        benchmark = self.records.loaded()
        names = (record.video_path for record in records)
        videos = await creation_digests(self.cache, self.records.video_root, names)
        expected = {
            record.record_id: expected_stream_s(record, self.config, self.profile)
            for record in records
        }
        return store_new_run(
            self.store, self.config, benchmark, stored_form, infos, videos, expected
        )

    def _resolve_modalities(self, records: list[Record]) -> None:
        """Settle what the new run streams before it is checked and stored: sound too when
        a record needs it, unless the modalities were given."""
        needs_audio = any(record.needs_audio for record in records)
        self.config = self.config.with_modalities(needs_audio)
        self.records.config = self.admission.config = self.config

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
        lease = RunLease(self.store, run_id, self.identity, self.lease_s)
        await lease.acquire()
        try:
            return await self._execute_owned(lease, retry_failed, allow_adapter_change)
        finally:
            await lease.release()

    async def admit(self, run_id: str, allow_adapter_change: bool = False) -> None:
        """Check this executor's endpoints against the run before working on it: reachable,
        serving what its tasks need, and the adapter identity the run used (RunError)."""
        by_id = self.records.by_id()
        self.records.check_inputs(self.store, run_id)
        wanted = {rid for session in self.store.sessions(run_id) for rid in session.record_ids}
        records = [by_id[rid] for rid in wanted if rid in by_id]
        infos = await self.admission.check_endpoints(records, self.notice)
        self.admission.check_identities(run_id, infos, allow_adapter_change)

    async def run_claimed(
        self,
        session: SessionInfo,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None] | None = None,
    ) -> SessionOutcome:
        """Run one session a worker claimed (its status is already `running`);
        `frames_ready` is called once its frames are ready (or cannot be)."""
        by_id = self.records.by_id()
        missing = [rid for rid in session.record_ids if rid not in by_id]
        if missing:
            raise RunError(f"run {session.run_id}: the benchmark has no records {missing[:3]}")
        record = by_id[session.record_ids[0]]
        video_root = self.records.video_root
        return await self._run_session(
            session.run_id, record, video_root, endpoint, writer, frames_ready
        )

    # ------------------------------------------------------------------ internals

    async def _execute_owned(
        self, lease: RunLease, retry_failed: bool, allow_adapter_change: bool
    ) -> RunSummary:
        run_id = lease.run_id
        stored = self.store.sessions(run_id)
        if not stored:
            raise RunError(
                f"run {run_id} has no sessions: its creation did not complete, so there is "
                "nothing to resume; start a new run"
            )
        by_id = self.records.by_id()  # a robustness run's variant records included
        benchmark = self.records.loaded()
        self.records.check_inputs(self.store, run_id)
        chosen = sessions_to_run(stored, retry_failed)
        records = [by_id[s.record_ids[0]] for s in chosen.todo]
        if records:
            infos = await self.admission.check_endpoints(records, self.notice)
            self.admission.check_identities(run_id, infos, allow_adapter_change)
        reset_started(self.store, run_id, chosen.todo, lease.identity)
        self.store.set_run_status(run_id, "running")
        self.records.use(benchmark)
        summary = RunSummary(run_id=run_id, total=len(records))
        sessions = SessionsPhase(self.progress, summary)
        worker = self._worker(run_id, records, sessions)
        work = self._prepare_and_stream(run_id, worker, records, sessions)
        await await_run_work(self.store, lease, lease.watched(work))
        close_summary(self.store, summary)
        summary.total = len(stored)
        summary.kept = len(stored) - len(chosen.todo)
        summary.retried = len(chosen.retried)
        return summary

    def _worker(self, run_id: str, records: list[Record], sessions: SessionsPhase) -> Worker:
        """The in-process worker that runs this execution's sessions, counting each."""
        worker = Worker(
            self.store,
            self.config.endpoints,
            self._this_runner,
            identity=self.identity,
            lease_s=self.lease_s,
            progress=sessions.count,
            give_up_s=self.give_up_s,
            notice=self.notice,
            start_rate=self._start_rate(),
        )
        self.admission.keep_left_out(worker.health, run_id, records)
        return worker

    def _start_rate(self) -> float | None:
        """Sessions started per second: only wall-clock pacing has frames that can be late."""
        if self.config.pacing != "wall_clock":
            return None
        if self.start_rate is not None:
            return self.start_rate
        return start_rate_for(sum(endpoint.concurrency for endpoint in self.config.endpoints))

    async def _prepare_and_stream(
        self, run_id: str, worker: Worker, records: list[Record], sessions: SessionsPhase
    ) -> None:
        """Stream the sessions while their videos' frames are prepared, in the order the
        sessions will be claimed (frame_preparation.py)."""
        frames = FramePreparation(self.cache, self.rules, self.progress, self._bound(run_id))
        order = await asyncio.to_thread(self._claim_order, run_id, records)
        preparing = asyncio.create_task(frames.prepare(self.records.video_root, order))
        try:
            sessions.start(len(records))
            done = await worker.run(run_id)
            await preparing  # its last videos were those of the last sessions: done by now
        finally:
            preparing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await preparing
        sessions.summary.decode = done.decode_report()
        sessions.finish()

    def _claim_order(self, run_id: str, records: list[Record]) -> list[Record]:
        """The records in the order the queue will hand their sessions out."""
        queue = SessionQueue(self.store, self.identity or this_worker(), self.lease_s)
        upcoming = queue.upcoming(run_id, len(records))
        by_id = {record.record_id: record for record in records}
        first = [by_id[s.record_ids[0]] for s in upcoming if s.record_ids[0] in by_id]
        return first + records  # any left over (none, normally) after those

    async def prepare_ahead(self, sessions: list[SessionInfo]) -> None:
        """Decode the videos of sessions a worker will likely claim next, one at a time,
        once no session of this process waits for its own video."""
        if not sessions:
            return
        await self._own_decodes.none_left()
        by_id = self.records.by_id()
        records = [by_id[s.record_ids[0]] for s in sessions if s.record_ids[0] in by_id]
        bound = self._bound(sessions[0].run_id)
        frames = FramePreparation(
            self.cache, self.rules, NO_PROGRESS, bound, preparers=1, wait_for_others=False
        )
        await frames.prepare(self.records.video_root, records)

    async def _this_runner(self, _run_id: str) -> RunExecutor:
        return self

    async def _audio(self, video: Path, expect: str | None) -> AudioTrack:
        """The video's sound at the run's sample rate, from the cache beside its frames."""
        digest = expect or await asyncio.to_thread(self.cache.digest, video)
        return await asyncio.to_thread(
            audio_track, self.cache.root, video, digest, self.config.audio_sample_rate
        )

    def _bound(self, run_id: str) -> VideoBinding:
        """The digests the run's videos are bound to (video_binding.py)."""
        if run_id not in self._videos:
            self._videos[run_id] = VideoBinding(self.store, run_id, self.cache)
        return self._videos[run_id]

    async def _run_session(
        self,
        run_id: str,
        record: Record,
        video_root: Path,
        endpoint: EndpointConfig,
        writer: EventWriter,
        frames_ready: Callable[[], None] | None = None,
    ) -> SessionOutcome:
        session_id = record.record_id
        asked = time.monotonic()
        try:
            video = video_root / record.video_path
            expect = await self._bound(run_id).expected(record.video_path, video)
            try:
                with self._own_decodes.one():
                    frames, waited_s = await self.cache.aget_waited(video, self.rules, expect)
            finally:
                if frames_ready is not None:
                    frames_ready()
            perturbed = self.records.perturbed.get(record.record_id)
            timeline = session_timeline(record, frames, self.config, self.profile, perturbed)
            audio = await self._audio(video, expect) if self.config.streams_audio else None
        except FramesError as exc:  # VideoDecodeError, VideoChangedError, FrameCacheError, ...
            stage = FailureStage.FRAMES.value
            cause = exc.cause  # input for the video/timeline, infrastructure for the cache
            outcome = SessionOutcome(session_id, "failed", stage, str(exc), cause)
            waited_s = time.monotonic() - asked
            failed = {"stage": stage, "reason": str(exc), "cause": cause}
            now = time.monotonic_ns()
            writer.put(Event(run_id, session_id, 0, EventKind.SESSION_FAILED, now, None, failed))
        else:
            plan = SessionPlan(run_id, session_id, record, timeline, frames, audio)
            info = self.admission.infos.get(endpoint.url)
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
                check_hello=None if info is None else functools.partial(hello_mismatch, info),
            )
            outcome = await driver.run()
        outcome = dataclasses.replace(outcome, video=record.video_path, decode_wait_s=waited_s)
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
    endpoints: list[EndpointConfig],
    *,
    cache_dir: Path | None = None,
    video_root: Path | None = None,
    identity: WorkerIdentity | None = None,
    lease_s: float = DEFAULT_LEASE_S,
    allow_adapter_change: bool = False,
) -> RunExecutor:
    """An executor for a worker joining a stored run: the run's own configuration, with this
    machine's endpoints, frame cache and (if given) video folder, admitted to the run."""
    stored = stored_config(store, run_id)
    local = {"endpoints": endpoints, "cache_dir": str(cache_dir or default_cache_dir())}
    if video_root is not None:
        local["video_root"] = str(video_root)
    executor = RunExecutor(
        stored.model_copy(update=local), store, identity=identity, lease_s=lease_s
    )
    await executor.admit(run_id, allow_adapter_change)
    return executor

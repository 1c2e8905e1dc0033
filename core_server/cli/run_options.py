"""The `run` command's options: how each one reads on the command line (flag, help; the
defaults stay in the command's signature, core_server/cli/run_command.py), and RunOptions,
the one object the command builds from them, with the checks they must pass together and
the RunConfig they make (a new run's, or a resumed run's stored one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streameval.core.cli.common import (
    PROFILE_HELP,
    RecordChoice,
    check_protocol_profile,
    fail,
    first_validation_error,
)
from streameval.core.cli.run_adapters import AdapterChoice
from streameval.core.streams.perturb_spec import NAMES as PERTURBATION_NAMES
from streameval.core.streams.perturb_spec import PRESET_HELP, PerturbationError, run_variants

# The configuration (pydantic models) is imported when a run starts: `streameval --help`
# builds the command tree without it.
if TYPE_CHECKING:
    from streameval.core.config import EndpointConfig, RunConfig
    from streameval.core.store.store import Store

# The longest lease or unreachable timeout `run` takes: a day (more overflows a timestamp).
MAX_TIMEOUT_S = 86400.0

AdapterUrlsOption = Annotated[
    list[str] | None,
    typer.Option("--adapter-url", help="Adapter endpoint ws://host:port/ws (repeatable)."),
]
ConcurrencyOption = Annotated[int, typer.Option(help="Sessions in flight per endpoint.")]
LimitOption = Annotated[int | None, typer.Option(help="At most this many records.")]
ProfileOption = Annotated[str, typer.Option(help=PROFILE_HELP)]
PacingOption = Annotated[str, typer.Option(help="logical or wall_clock.")]
SpeedOption = Annotated[float, typer.Option(help="Wall-clock speed factor.")]
FpsOption = Annotated[float | None, typer.Option(help="Sampling rate (profile's by default).")]
MaxWidthOption = Annotated[int, typer.Option(help="Frame width cap.")]
ModalitiesOption = Annotated[
    str | None,
    typer.Option(
        help="What the Core streams: video, or video,audio (the sound as PCM chunks) "
        "[default: video,audio when a task of the benchmark needs its sound, else video]."
    ),
]
QaHistoryOption = Annotated[
    float | None, typer.Option("--qa-history", help="Seconds before the anchor; 0 = all.")
]
ResponseTimeoutOption = Annotated[float, typer.Option(help="Seconds per answer/step.")]
AdapterReadyTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--adapter-ready-timeout",
        help="Seconds to wait for an adapter that is still loading its model (its "
        "/healthz answers 503 loading) before sessions start [default: 600].",
    ),
]
CacheDirOption = Annotated[Path | None, typer.Option(help="Frame and benchmark cache.")]
VerifyVideoDigestsOption = Annotated[
    bool,
    typer.Option(
        "--verify-video-digests",
        help="Hash every video in full to find its cached frames, instead of trusting "
        "the digest remembered for the file's size, times and inode.",
    ),
]
ResumeOption = Annotated[
    str | None, typer.Option("--resume", help="Continue an interrupted run by its id.")
]
RetryFailedOption = Annotated[
    bool,
    typer.Option(
        "--retry-failed",
        help="With --resume: also redo the sessions that failed for infrastructure "
        "reasons (unreachable, crashed or timed-out adapter), as new attempts.",
    ),
]
AllowAdapterChangeOption = Annotated[
    bool,
    typer.Option(
        "--allow-adapter-change",
        help="With --resume: accept endpoints serving another adapter, version or model "
        "than the run used; the run then lists every adapter it used.",
    ),
]
DetachOption = Annotated[
    bool,
    typer.Option(
        "--detach",
        help="Only create the run (its sessions wait in the store) and print its id; "
        "`streameval worker` processes run it (docs/scale.md).",
    ),
]
LeaseTimeoutOption = Annotated[
    float,
    typer.Option(
        "--lease-timeout",
        help="Seconds before another Core may take over this run if this one dies "
        "(it renews its lease every third of that).",
    ),
]
UnreachableTimeoutOption = Annotated[
    float,
    typer.Option(
        "--unreachable-timeout",
        help="Seconds every adapter endpoint may stay out of rotation (unreachable) "
        "before the run stops as interrupted instead of failing its sessions.",
    ),
]
StartRateOption = Annotated[
    float | None,
    typer.Option(
        "--start-rate",
        help="Wall-clock pacing: sessions started per second, so that thousands do not "
        "connect at once (default: the concurrency over 10 s, at least 50 a second; each "
        "session's stream time starts when it starts).",
    ),
]
PerturbOption = Annotated[
    list[str] | None,
    typer.Option(
        "--perturb",
        metavar="NAME[:KEY=VALUE,...]",
        help="Also stream every record under this perturbation (repeatable; "
        f"docs/robustness.md): {', '.join(PERTURBATION_NAMES)}.",
    ),
]
RobustnessOption = Annotated[
    str | None,
    typer.Option(
        "--robustness",
        help=f"Also stream every record under a preset list of perturbations: {PRESET_HELP}.",
    ),
]
PerturbSeedOption = Annotated[
    int, typer.Option("--perturb-seed", help="Seed of the perturbations' random draws.")
]


# The option of `run` that sets each RunConfig field it can get wrong: an invalid value is
# reported under the flag the user typed, not the field's name.
CONFIG_FLAGS = {
    "speed": "--speed",
    "fps": "--fps",
    "max_width": "--max-width",
    "modalities": "--modalities",
    "limit": "--limit",
    "qa_history_s": "--qa-history",
    "response_timeout_s": "--response-timeout",
    "adapter_ready_timeout_s": "--adapter-ready-timeout",
    "perturb_seed": "--perturb-seed",
}


def modality_list(value: str | None) -> list[str] | None:
    """`--modalities video,audio` as the configuration's list (None: not given); a name
    other than video and audio, or a list without video, fails in one line."""
    if value is None:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in ("video", "audio")]
    if unknown or "video" not in names:
        raise fail(f"--modalities takes video or video,audio, not {value!r}")
    return names


def option_error(exc: ValueError) -> str:
    """The first problem of the run's configuration, as one line naming its option."""
    line = first_validation_error(exc)
    field, colon, rest = line.partition(": ")
    return f"{CONFIG_FLAGS[field]}: {rest}" if colon and field in CONFIG_FLAGS else line


@dataclass(frozen=True)
class RunOptions(AdapterChoice):
    """Every option of one `streameval run`, as given (None: not given); those of the
    adapter it starts (--adapter ...) come from AdapterChoice."""

    adapter_url: list[str] | None
    concurrency: int
    records: RecordChoice
    profile: str
    pacing: str
    speed: float
    fps: float | None
    max_width: int
    qa_history: float | None
    response_timeout: float
    adapter_ready_timeout: float | None
    cache_dir: Path | None
    verify_video_digests: bool
    store: str | None
    resume: str | None
    retry_failed: bool
    allow_adapter_change: bool
    detach: bool
    lease_timeout: float
    unreachable_timeout: float
    perturb: list[str] | None
    robustness: str | None
    perturb_seed: int
    as_json: bool
    start_rate: float | None = None
    modalities: str | None = None

    def check(self, ctx: typer.Context) -> None:
        """Fail with one line on options that do not go together, before any store opens."""
        self._check_finite()
        self.check_adapter_choice(adapter_url_given=bool(self.adapter_url))
        if self.detach and self.adapter:
            raise fail(
                "--detach only creates the run: give --adapter to the `streameval worker` "
                "processes that run it"
            )
        for name, value in (
            ("--lease-timeout", self.lease_timeout),
            ("--unreachable-timeout", self.unreachable_timeout),
        ):
            if not 0 < value <= MAX_TIMEOUT_S:  # NaN fails this too
                raise fail(f"{name} must be more than 0 and at most {MAX_TIMEOUT_S:g} seconds")
        if self.start_rate is not None and not 0 < self.start_rate < math.inf:
            raise fail(f"--start-rate must be a positive number, got {self.start_rate:g}")
        if not self.resume and (self.retry_failed or self.allow_adapter_change):
            flag = "--retry-failed" if self.retry_failed else "--allow-adapter-change"
            raise fail(f"{flag} only applies to a resumed run: add --resume RUN_ID")
        if self.detach and self.resume:
            raise fail("--detach creates a new run: workers continue a stored one by itself")
        if self.resume and self.modalities is not None:
            raise fail("--modalities applies to a new run: a resumed run keeps its own")
        if self.resume and (self.perturb or self.robustness):
            raise fail("--perturb/--robustness apply to a new run: a resumed run keeps its own")
        if not self.resume:
            check_protocol_profile(ctx, self.profile)
        try:
            run_variants(self.perturb or [], self.robustness)  # a spec error is one line
        except PerturbationError as exc:
            raise fail(str(exc)) from None

    def _check_finite(self) -> None:
        """NaN and infinity, refused under their flag (a resume copies some options into
        the stored configuration without validating them again)."""
        for flag, value in (
            ("--speed", self.speed),
            ("--fps", self.fps),
            ("--qa-history", self.qa_history),
            ("--response-timeout", self.response_timeout),
            ("--adapter-ready-timeout", self.adapter_ready_timeout),
        ):
            if value is not None and not math.isfinite(value):
                raise fail(f"{flag} must be a finite number, not {value}")

    def config(self, store: Store) -> RunConfig:
        """The run's configuration: the resumed run's, with what these options change in
        it, or a new run's (with --adapter, the endpoints of its replicas are set once they
        listen)."""
        return self._resumed_config(store, self.resume) if self.resume else self._new_config()

    def _endpoints(self) -> list[EndpointConfig]:
        from streameval.core.config import EndpointConfig

        return [EndpointConfig(url=u, concurrency=self.concurrency) for u in self.adapter_url or []]

    def _resumed_config(self, store: Store, run_id: str) -> RunConfig:
        """The stored run's configuration, with the endpoints, the adapter-ready timeout,
        the digest checking and the videos allowed outside the video root these options
        give (nothing else of a run may change)."""
        from streameval.core.run.runner import stored_config

        config = stored_config(store, run_id)
        if self.adapter_url:
            config = config.model_copy(update={"endpoints": self._endpoints()})
        if self.adapter_ready_timeout is not None:
            update = {"adapter_ready_timeout_s": self.adapter_ready_timeout}
            config = config.model_copy(update=update)
        if self.verify_video_digests:
            config = config.model_copy(update={"verify_video_digests": True})
        if self.records.allow_outside_video_root:
            config = config.model_copy(update={"allow_outside_video_root": True})
        return config

    def _new_config(self) -> RunConfig:
        from streameval.core.config import RunConfig

        if not self.adapter_url and not self.adapter and not self.detach:
            raise fail(
                "give --adapter NAME (the Core starts it) or --adapter-url of one you run "
                "(or use `streameval demo`)"
            )
        return RunConfig(
            **self.records.config_fields(),
            endpoints=self._endpoints(),
            profile=self.profile,
            pacing=self.pacing,
            speed=self.speed,
            fps=self.fps,
            max_width=self.max_width,
            qa_history_s=self.qa_history,
            response_timeout_s=self.response_timeout,
            verify_video_digests=self.verify_video_digests,
            perturbations=self.perturb or [],
            robustness=self.robustness,
            perturb_seed=self.perturb_seed,
            modalities=modality_list(self.modalities),
            **({"cache_dir": str(self.cache_dir)} if self.cache_dir else {}),
            **(
                {"adapter_ready_timeout_s": self.adapter_ready_timeout}
                if self.adapter_ready_timeout is not None
                else {}
            ),
        )

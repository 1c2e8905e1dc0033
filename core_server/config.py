"""A run's declared configuration: what is evaluated, against what, under which conditions.

The resolved `RunConfig` is stored with every run (and hashed), so a number can always be
traced back to the conditions it was obtained under.

May import: errors, store, frames, benchmark, streams.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from streameval.core.store.locations import default_cache_dir
from streameval.protocol import WS_PATH, AdapterConditions, AudioConditions, RunConditions

# One local port per connection to an endpoint's host:port: a Core cannot hold more.
MAX_ENDPOINT_CONCURRENCY = 65_535

Pacing = Literal["logical", "wall_clock"]
Modality = Literal["video", "audio"]
DEFAULT_AUDIO = AudioConditions()

# Ranges of the delivery options (docs/security.md, "Limits"): sampling a video faster than
# 60 fps only writes duplicate JPEGs (1e9 fps filled a disk), and a speed outside
# [0.01, 1000] is either a typo or overflows the wall-clock schedule (1e-300).
MIN_FPS, MAX_FPS = 0.01, 60.0
MIN_SPEED, MAX_SPEED = 0.01, 1000.0
# What one response may stream before the Core fails its session (protocol error
# `response_too_large`): far beyond any real answer, low enough that a runaway adapter
# cannot fill the store or make scoring slow.
MAX_RESPONSE_DELTAS = 20_000
MAX_RESPONSE_BYTES = 4 * 1024 * 1024
# Adapter messages the Core records for one session (protocol error `too_many_events`):
# a real session records a few thousand; a flooding adapter must not fill the store.
MAX_SESSION_EVENTS = 1_000_000

# The control API accepts adapter endpoints on these hosts only (host or host:port patterns,
# `*` wildcards, comma-separated); the command line trusts the URLs its operator gives.
ADAPTER_HOSTS_ENV = "STREAMEVAL_ADAPTER_HOSTS"
DEFAULT_ADAPTER_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def check_endpoint_url(url: str) -> str:
    """The URL if it is a plain adapter endpoint, ws[s]://host[:port]/ws; ValueError (one
    line) otherwise. No credentials, query or fragment: an endpoint is a place, and a URL
    that carries a password ends up in logs, the store and exports.

    A URL with no path gets /ws: every adapter serves its sessions there, so
    `ws://host:port` can only mean `ws://host:port/ws`."""
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        # urlsplit silently drops tabs and newlines: the URL used would not be the one given.
        raise ValueError(f"adapter endpoint {url!r} contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # parses it: a non-numeric or out-of-range port raises here
    except ValueError as exc:
        raise ValueError(f"adapter endpoint {url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("ws", "wss"):
        raise ValueError(f"adapter endpoint must be a ws:// or wss:// URL, got {url!r}")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("adapter endpoint must not carry credentials (user:password@)")
    if not parts.hostname:
        raise ValueError(f"adapter endpoint {url!r} names no host")
    if parts.path in ("", "/"):
        parts = parts._replace(path=WS_PATH)
    if parts.path != WS_PATH or parts.query or parts.fragment:
        raise ValueError(f"adapter endpoint path must be {WS_PATH} (nothing after it), got {url!r}")
    if port == 0:
        raise ValueError(f"adapter endpoint {url!r} has port 0")
    return parts.geturl()


def adapter_host_patterns(value: str | None = None) -> tuple[str, ...]:
    """The allow-list: `value`, else $STREAMEVAL_ADAPTER_HOSTS, else loopback."""
    raw = os.environ.get(ADAPTER_HOSTS_ENV) if value is None else value
    patterns = tuple(p.strip().lower() for p in (raw or "").split(",") if p.strip())
    return patterns or DEFAULT_ADAPTER_HOSTS


def _host_and_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host  # IPv6, written as in a URL
    return host, parts.port or (443 if parts.scheme == "wss" else 80)


def _wildcard(pattern: str) -> re.Pattern[str]:
    # Only `*` is special (any characters): fnmatch would read IPv6's [::1] as a class.
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def host_allowed(url: str, patterns: tuple[str, ...]) -> bool:
    """Whether the endpoint's host (and port) match one `host` or `host:port` pattern."""
    host, port = _host_and_port(url)
    for pattern in patterns:
        # A pattern's port is what follows its last colon outside IPv6 brackets.
        name, _, wanted = (
            pattern.rpartition(":")
            if pattern.rfind(":") > pattern.rfind("]")
            else (pattern, "", "")
        )
        if _wildcard(name).fullmatch(host) and (not wanted or wanted == str(port)):
            return True
    return False


class EndpointConfig(BaseModel):
    """One adapter service. Several replicas of one model are several endpoints."""

    model_config = ConfigDict(extra="forbid")

    url: str
    # Bounded by the port range only; the worker fits it to what its machine holds.
    concurrency: int = Field(default=4, ge=1, le=MAX_ENDPOINT_CONCURRENCY)

    @field_validator("url")
    @classmethod
    def _websocket_url(cls, url: str) -> str:
        return check_endpoint_url(url)

    @property
    def http_base(self) -> str:
        base = "http" + self.url[2:]
        return base.removesuffix("/").removesuffix("/ws")


class ProtocolProfile(BaseModel):
    """A named protocol profile: how the timeline is delivered and what adapters it admits.

    `qa_history_s` and `proactive_lead_s` are the seconds of video delivered before the
    evidence anchor / the instruction; 0 means the whole prefix from the video's start.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    fps: float
    qa_history_s: float
    proactive_lead_s: float
    proactive_initiation: tuple[str, ...]
    proactive_state: tuple[str, ...] = ("native", "non-native")
    pacing: Pacing | None = None  # None: either pacing
    frame_level_steps: bool = False  # a silent-or-respond decision after every frame
    probe_questions: bool = False  # ask a proactive record's probes instead of monitoring

    def conflicts(self, conditions: AdapterConditions, has_proactive: bool) -> str | None:
        """Why an adapter's declared conditions contradict this profile, or None."""
        if not has_proactive or self.probe_questions:
            return None
        if conditions.initiation not in self.proactive_initiation:
            return (
                f"profile {self.name} needs proactive initiation in "
                f"{list(self.proactive_initiation)}, adapter declares {conditions.initiation!r}"
            )
        if conditions.state not in self.proactive_state:
            return (
                f"profile {self.name} needs state in {list(self.proactive_state)}, "
                f"adapter declares {conditions.state!r}"
            )
        return None


SELF_INITIATED = ("autonomous", "polled")

PROTOCOL_PROFILES: dict[str, ProtocolProfile] = {
    profile.name: profile
    for profile in (
        ProtocolProfile(
            name="trace",
            description="TRACE standard: 1 fps, QA frames from evidence anchor - 10 s, "
            "proactive frames from instruction - 5 s, self-initiated proactive output "
            "(autonomous, or a decision at every step with no per-window prompt)",
            fps=1.0,
            qa_history_s=10.0,
            proactive_lead_s=5.0,
            proactive_initiation=SELF_INITIATED,
        ),
        ProtocolProfile(
            name="trace-full-prefix",
            description="TRACE with the whole legal prefix delivered for QA",
            fps=1.0,
            qa_history_s=0.0,
            proactive_lead_s=5.0,
            proactive_initiation=SELF_INITIATED,
        ),
        ProtocolProfile(
            name="trace-autonomous",
            description="TRACE restricted to natively stateful, autonomous proactive systems",
            fps=1.0,
            qa_history_s=10.0,
            proactive_lead_s=5.0,
            proactive_initiation=("autonomous",),
            proactive_state=("native",),
        ),
        ProtocolProfile(
            name="realstream",
            description="RealStreamEval frame-level multi-turn protocol: 0.5 fps from the "
            "video's start, logical pacing, a Silent-or-respond decision at every step, "
            "queries arrive at their step",
            fps=0.5,
            qa_history_s=0.0,
            proactive_lead_s=0.0,
            proactive_initiation=SELF_INITIATED,
            pacing="logical",
            frame_level_steps=True,
        ),
        ProtocolProfile(
            name="ovo-offline",
            description="OVO-Bench's own protocol: the legal prefix up to each question; "
            "forward-active tasks asked as their probes, one by one",
            fps=1.0,
            qa_history_s=0.0,
            proactive_lead_s=0.0,
            proactive_initiation=SELF_INITIATED,
            pacing="logical",
            probe_questions=True,
        ),
        ProtocolProfile(
            name="streamingbench-polling",
            description="StreamingBench's own protocol: the prefix up to the question; "
            "proactive tasks polled every second from the instruction on",
            fps=1.0,
            qa_history_s=0.0,
            proactive_lead_s=0.0,
            proactive_initiation=("polled",),
        ),
    )
}


def audio_refusal(adapter: str | None) -> str:
    """Why a run that streams sound refuses an adapter that does not take it (one line)."""
    return (
        f"the run streams audio (--modalities video,audio) and adapter {adapter} does not "
        "take audio (its hello declares none); run it with --modalities video to evaluate "
        "it without sound"
    )


# The commands whose --profile takes each kind of profile: the option means one kind in
# `run` and the other in `score`, so a name of the wrong kind is an easy slip.
PROFILE_KINDS = {"protocol": "run and capacity", "scoring": "score, compare and report"}


def unknown_profile(kind: str, name: str, known: Iterable[str], other: Collection[str]) -> str:
    """The error line for a `kind` profile ("protocol" or "scoring") that is none of `known`;
    when `name` is among `other`, the other kind's names, the line says so."""
    (other_kind,) = set(PROFILE_KINDS) - {kind}
    slip = f" ({name!r} is a {other_kind} profile, for {PROFILE_KINDS[other_kind]})"
    return (
        f"unknown {kind} profile {name!r}{slip if name in other else ''}; "
        f"{kind} profiles: {', '.join(known)}"
    )


class RunConfig(BaseModel):
    # No NaN or infinity in any number: a stored configuration is JSON, which holds neither.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    benchmark: str = Field(
        description="'synthetic', a benchmark.json, a TRACE release directory, an OVO-Bench or "
        "a StreamingBench JSON file"
    )
    benchmark_seed: int = 0
    video_root: str | None = Field(default=None, description="None = next to the benchmark")
    subset: str | None = Field(default=None, description="TRACE release: tiny, standard, full")
    # Video paths leading outside the video root (absolute, `..`, symlinks) are refused
    # unless this is set. Left out of a dump when unset: configurations stored before it
    # existed keep their bytes and hash.
    allow_outside_video_root: bool = Field(default=False, exclude_if=lambda allowed: not allowed)
    tasks: list[Literal["qa", "proactive"]] = ["qa", "proactive"]
    task_types: list[str] = Field(default_factory=list, description="empty = all")
    limit: int | None = Field(default=None, ge=1)
    endpoints: list[EndpointConfig]
    profile: str = "trace"
    pacing: Pacing = "logical"
    speed: float = Field(default=1.0, ge=MIN_SPEED, le=MAX_SPEED)
    fps: float | None = Field(
        default=None, ge=MIN_FPS, le=MAX_FPS, description="None = the profile's"
    )
    max_width: int = Field(default=960, ge=16)
    jpeg_quality: int = Field(default=90, ge=1, le=100)
    qa_history_s: float | None = Field(default=None, ge=0, description="0 = full prefix")
    proactive_lead_s: float | None = Field(default=None, ge=0)
    proactive_tolerance_s: float = Field(default=5.0, gt=0)
    response_timeout_s: float = Field(default=60.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    adapter_ready_timeout_s: float = Field(
        default=600.0,
        ge=0,
        description="seconds to wait for a loading adapter (/healthz 503) to become ready",
    )
    max_response_deltas: int = Field(
        default=MAX_RESPONSE_DELTAS, ge=1, description="deltas one response may stream"
    )
    max_response_bytes: int = Field(
        default=MAX_RESPONSE_BYTES,
        ge=1024,
        description="UTF-8 bytes of delta text one response may stream",
    )
    max_session_events: int = Field(
        default=MAX_SESSION_EVENTS,
        ge=1,
        description="adapter messages the Core records for one session",
    )
    cache_dir: str = Field(default_factory=lambda: str(default_cache_dir()))
    # The frame cache finds a video's content digest from the file's size, times and inode;
    # this hashes every video in full instead (a file system whose times cannot be trusted).
    verify_video_digests: bool = False
    # A robustness run (docs/robustness.md): every record streamed again per variant.
    perturbations: list[str] = Field(
        default_factory=list, description="NAME[:KEY=VALUE,...] specs, stored normalised"
    )
    robustness: str | None = Field(default=None, description="a preset: standard")
    perturb_seed: int = Field(default=0, ge=0, description="seed of the perturbations' draws")
    # What the Core streams: None resolves, when the run is created, to video and audio if a
    # record of the benchmark needs its sound, else video. Video alone, the sample rate and
    # the chunk length at their defaults are left out of a dump: configurations stored
    # before sound existed keep their bytes and hash.
    modalities: list[Modality] | None = Field(
        default=None,
        exclude_if=lambda value: value is None or value == ["video"],
        description="None = what the benchmark needs",
    )
    audio_sample_rate: int = Field(
        default=DEFAULT_AUDIO.sample_rate,
        ge=8_000,
        le=48_000,
        exclude_if=lambda value: value == DEFAULT_AUDIO.sample_rate,
    )
    audio_chunk_s: float = Field(
        default=DEFAULT_AUDIO.chunk_s,
        ge=0.02,
        le=10.0,
        exclude_if=lambda value: value == DEFAULT_AUDIO.chunk_s,
    )

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        if name not in PROTOCOL_PROFILES:
            raise ValueError(unknown_profile("protocol", name, PROTOCOL_PROFILES, ()))
        return name

    @field_validator("perturbations")
    @classmethod
    def _normal_perturbations(cls, specs: list[str]) -> list[str]:
        from streameval.core.streams.perturb_spec import parse_spec

        return [parse_spec(spec).label for spec in specs]

    @field_validator("robustness")
    @classmethod
    def _known_preset(cls, preset: str | None) -> str | None:
        from streameval.core.streams.perturb_spec import run_variants

        run_variants((), preset)
        return preset

    @field_validator("modalities")
    @classmethod
    def _video_always(cls, modalities: list[Modality] | None) -> list[Modality] | None:
        if modalities is None:
            return None
        if "video" not in modalities:
            raise ValueError("modalities must include video (the Core streams sound with frames)")
        return [name for name in ("video", "audio") if name in modalities]

    @property
    def streams_audio(self) -> bool:
        return self.modalities is not None and "audio" in self.modalities

    def with_modalities(self, needs_audio: bool) -> RunConfig:
        """Unset modalities resolved: video and audio when the benchmark needs its sound."""
        if self.modalities is not None:
            return self
        return self.model_copy(
            update={"modalities": ["video", "audio"] if needs_audio else ["video"]}
        )

    @model_validator(mode="after")
    def _pacing_fits_profile(self) -> RunConfig:
        required = PROTOCOL_PROFILES[self.profile].pacing
        if required is not None and self.pacing != required:
            raise ValueError(f"profile {self.profile} needs {required} pacing, not {self.pacing}")
        return self

    def resolved(self) -> RunConfig:
        """Fill every profile default in, so the stored configuration is explicit."""
        profile = PROTOCOL_PROFILES[self.profile]
        return self.model_copy(
            update={
                "fps": self.fps if self.fps is not None else profile.fps,
                "qa_history_s": (
                    self.qa_history_s if self.qa_history_s is not None else profile.qa_history_s
                ),
                "proactive_lead_s": (
                    self.proactive_lead_s
                    if self.proactive_lead_s is not None
                    else profile.proactive_lead_s
                ),
            }
        )

    def run_conditions(self) -> RunConditions:
        resolved = self.resolved()
        return RunConditions(
            profile=resolved.profile,
            pacing=resolved.pacing,
            speed=resolved.speed,
            fps=resolved.fps,
            max_width=resolved.max_width,
            jpeg_quality=resolved.jpeg_quality,
            qa_history_s=resolved.qa_history_s,
            proactive_lead_s=resolved.proactive_lead_s,
            audio=self.audio_conditions(),
        )

    def audio_conditions(self) -> AudioConditions | None:
        """How sound is delivered, or None for a run that streams none."""
        if not self.streams_audio:
            return None
        return AudioConditions(sample_rate=self.audio_sample_rate, chunk_s=self.audio_chunk_s)

"""A run's declared configuration: what is evaluated, against what, under which conditions.

The resolved `RunConfig` is stored with every run (and hashed), so a number can always be
traced back to the conditions it was obtained under.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from adapters.protocol import AdapterConditions, RunConditions
from core_server.paths import default_cache_dir

Pacing = Literal["logical", "wall_clock"]


class EndpointConfig(BaseModel):
    """One adapter service. Several replicas of one model are several endpoints."""

    model_config = ConfigDict(extra="forbid")

    url: str
    concurrency: int = Field(default=4, ge=1, le=1024)

    @field_validator("url")
    @classmethod
    def _websocket_url(cls, url: str) -> str:
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(f"adapter endpoint must be a ws:// or wss:// URL, got {url!r}")
        return url

    @property
    def http_base(self) -> str:
        base = "http" + self.url[2:]
        return base.removesuffix("/ws")


class Profile(BaseModel):
    """A named protocol profile: delivery defaults and what adapters it admits."""

    model_config = ConfigDict(frozen=True)

    name: str
    fps: float
    qa_history_s: float
    proactive_lead_s: float
    proactive_initiation: tuple[str, ...]
    proactive_state: tuple[str, ...] = ("native", "non-native")

    def conflicts(self, conditions: AdapterConditions, has_proactive: bool) -> str | None:
        """Why an adapter's declared conditions contradict this profile, or None."""
        if not has_proactive:
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


PROFILES: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        # TRACE standard: 1 fps, QA history from evidence_anchor - 10 s, proactive from
        # instruction - 5 s; proactive output must be self-initiated or polled per step.
        Profile(
            name="trace",
            fps=1.0,
            qa_history_s=10.0,
            proactive_lead_s=5.0,
            proactive_initiation=("autonomous", "polled"),
        ),
        Profile(
            name="trace-full-prefix",
            fps=1.0,
            qa_history_s=0.0,
            proactive_lead_s=5.0,
            proactive_initiation=("autonomous", "polled"),
        ),
        Profile(
            name="trace-autonomous",
            fps=1.0,
            qa_history_s=10.0,
            proactive_lead_s=5.0,
            proactive_initiation=("autonomous",),
            proactive_state=("native",),
        ),
        # RealStreamEval: 0.5 fps, a Silent-or-respond decision at every step.
        Profile(
            name="realstream",
            fps=0.5,
            qa_history_s=0.0,
            proactive_lead_s=0.0,
            proactive_initiation=("polled", "autonomous"),
        ),
    )
}


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    benchmark: str = Field(
        description="'synthetic', a benchmark.json, a TRACE release directory, an OVO-Bench or "
        "a StreamingBench JSON file"
    )
    benchmark_seed: int = 0
    video_root: str | None = Field(default=None, description="None = next to the benchmark")
    subset: str | None = Field(default=None, description="TRACE release: tiny, standard, full")
    tasks: list[Literal["qa", "proactive"]] = ["qa", "proactive"]
    task_types: list[str] = Field(default_factory=list, description="empty = all")
    limit: int | None = Field(default=None, ge=1)
    endpoints: list[EndpointConfig]
    profile: str = "trace"
    pacing: Pacing = "logical"
    speed: float = Field(default=1.0, gt=0)
    fps: float | None = Field(default=None, gt=0, description="None = the profile's")
    max_width: int = Field(default=960, ge=16)
    jpeg_quality: int = Field(default=90, ge=1, le=100)
    qa_history_s: float | None = Field(default=None, ge=0, description="0 = full prefix")
    proactive_lead_s: float | None = Field(default=None, ge=0)
    proactive_tolerance_s: float = Field(default=5.0, gt=0)
    response_timeout_s: float = Field(default=60.0, gt=0)
    connect_timeout_s: float = Field(default=10.0, gt=0)
    cache_dir: str = Field(default_factory=lambda: str(default_cache_dir()))

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, name: str) -> str:
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
        return name

    def resolved(self) -> RunConfig:
        """Fill every profile default in, so the stored configuration is explicit."""
        profile = PROFILES[self.profile]
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
        )

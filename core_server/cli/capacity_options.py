"""The `capacity` command's options: how its own ones read on the command line (the
defaults stay in the command's signature, core_server/cli/capacity.py), and
CapacityOptions, the one object the command builds from them, with the checks they must
pass and the search settings they make.
"""

from __future__ import annotations

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
from streameval.errors import UserError

# The search and the configuration (pydantic models) are imported when a search starts:
# `streameval --help` builds the command tree without them.
if TYPE_CHECKING:
    from streameval.core.analyses.capacity_search import SearchSettings

AdapterUrlOption = Annotated[
    str, typer.Option("--adapter-url", help="The one adapter endpoint, ws://host:port/ws.")
]
SloOption = Annotated[
    str,
    typer.Option(
        "--slo",
        help="Latency target, TERM=VALUE,...: ttft_p50, ttft_p95, latency_p95, lag_p99 "
        "(seconds, at most), drop_rate, failed_rate (at most; failed_rate=0 unless "
        "given), qa_accuracy, in_window_accuracy (at least).",
    ),
]
LevelLimitOption = Annotated[
    int | None, typer.Option(help="Use at most this many records (repeated per level).")
]
WallClockProfileOption = Annotated[
    str, typer.Option(help=f"{PROFILE_HELP.removesuffix('.')}; one that allows wall-clock.")
]
StartOption = Annotated[int, typer.Option(min=1, help="The first level (sessions at once).")]
MostOption = Annotated[int, typer.Option("--max", min=1, help="The largest level tried.")]
SessionsPerLevelOption = Annotated[
    int | None,
    typer.Option(
        "--sessions-per-level",
        min=1,
        help="Sessions each level runs, N at once (at least N) [default: N].",
    ),
]
ServerMetricsOption = Annotated[
    str | None,
    typer.Option(
        "--server-metrics",
        help="The model server's Prometheus endpoint (vLLM: http://HOST:PORT/metrics), "
        "read before, during and after each level [default: the one the adapter's /info "
        "names, e.g. the openai adapter's server].",
    ),
]


@dataclass(frozen=True)
class CapacityOptions:
    """Every option of one `streameval capacity`, as given (None: not given)."""

    adapter_url: str
    slo: str
    records: RecordChoice
    profile: str
    speed: float
    start: int
    most: int
    sessions_per_level: int | None
    server_metrics: str | None
    response_timeout: float
    cache_dir: Path | None
    store: str | None
    as_json: bool

    def check(self, ctx: typer.Context) -> None:
        """Fail with one line on options that cannot make a search."""
        if self.start > self.most:
            raise fail(f"--start {self.start} is above --max {self.most}")
        check_protocol_profile(ctx, self.profile)
        metrics = self.server_metrics
        if metrics is not None and not metrics.startswith(("http://", "https://")):
            raise fail(f"--server-metrics must be an http:// or https:// URL, got {metrics!r}")

    def settings(self) -> SearchSettings:
        """The search: its SLO and each level's run, validated as a run's configuration
        (the same one-line errors as `run`)."""
        from streameval.core.analyses.capacity_search import SearchSettings, parse_slo
        from streameval.core.config import EndpointConfig, RunConfig

        try:
            terms = parse_slo(self.slo)
            endpoint = EndpointConfig(url=self.adapter_url)
            base = RunConfig(
                **self.records.config_fields(),
                endpoints=[endpoint],
                profile=self.profile,
                pacing="wall_clock",
                speed=self.speed,
                response_timeout_s=self.response_timeout,
                **({"cache_dir": str(self.cache_dir)} if self.cache_dir else {}),
            )
        except UserError as exc:
            raise fail(str(exc)) from None
        except ValueError as exc:  # pydantic validation of the options
            raise fail(first_validation_error(exc)) from None
        return SearchSettings(
            adapter_url=endpoint.url,
            slo=terms,
            base=base,
            start=self.start,
            most=self.most,
            sessions_per_level=self.sessions_per_level,
            server_metrics=self.server_metrics,
        )

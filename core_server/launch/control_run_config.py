"""What a run started over the control API may be (docs/security.md): its endpoints
registered or on allowed hosts, no `cache_dir` (the Core uses its own), and its
`benchmark` and `video_root` either `synthetic` or paths under `STREAMEVAL_DATA_ROOT`.
RunRequest is what a client asks for; `config_for` turns it into the RunConfig to run, or
a 422.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel, Field, ValidationError

from streameval.core.benchmark.loader import SYNTHETIC
from streameval.core.config import RunConfig
from streameval.core.launch.control_adapters import allowed_endpoint, first_error, registered
from streameval.core.store.store import Store

DATA_ROOT_ENV = "STREAMEVAL_DATA_ROOT"


class RunRequest(BaseModel):
    """A RunConfig whose endpoints may also name registered adapters."""

    config: RunConfig | None = None
    adapters: list[str] = Field(default_factory=list, description="registered adapter names")
    overrides: dict = Field(
        default_factory=dict,
        description="RunConfig fields other than endpoints and cache_dir; benchmark and "
        "video_root are 'synthetic', 'synthetic-av' or paths under STREAMEVAL_DATA_ROOT",
    )


def config_for(request: RunRequest, store: Store) -> RunConfig:
    """The run the request asks for, on its registered adapters, confined; or a 422."""
    registry = registered(store)
    unknown = [name for name in request.adapters if name not in registry]
    if unknown:
        raise HTTPException(422, f"unregistered adapters: {unknown}")
    endpoints = [registry[name] for name in request.adapters]
    if request.config is not None:
        config = request.config
        if endpoints:
            config = config.model_copy(update={"endpoints": endpoints})
        if "cache_dir" in request.config.model_fields_set:
            raise _no_cache_dir()
        return _confined(config)
    if not endpoints:
        raise HTTPException(422, "name registered adapters or give a full config")
    if "endpoints" in request.overrides:
        raise HTTPException(422, "overrides cannot set endpoints: name registered adapters")
    if "cache_dir" in request.overrides:
        raise _no_cache_dir()
    try:
        config = RunConfig(endpoints=endpoints, **{"benchmark": "synthetic", **request.overrides})
    except ValidationError as exc:
        raise HTTPException(422, first_error(exc)) from None
    return _confined(config)


def _no_cache_dir() -> HTTPException:
    return HTTPException(
        422, "cache_dir cannot be set over the API: the Core uses its own (STREAMEVAL_CACHE_DIR)"
    )


def _confined(config: RunConfig) -> RunConfig:
    """The run's endpoints on allowed hosts, its benchmark and video root under the data
    root (resolved, symlinks included) and its videos under its video root, or a 422."""
    for endpoint in config.endpoints:
        allowed_endpoint(endpoint.url, endpoint.concurrency)
    if config.allow_outside_video_root:
        raise HTTPException(
            422,
            "allow_outside_video_root cannot be set over the API: videos stay under the video root",
        )
    update: dict[str, Any] = {}
    if config.benchmark not in SYNTHETIC:
        update["benchmark"] = str(_under_data_root("benchmark", config.benchmark))
    if config.video_root is not None:
        update["video_root"] = str(_under_data_root("video_root", config.video_root))
    return config.model_copy(update=update) if update else config


def _under_data_root(field: str, value: str) -> Path:
    root_text = os.environ.get(DATA_ROOT_ENV)
    if not root_text:
        raise HTTPException(
            422,
            f"{field}: only the synthetic benchmark can be run over the API unless the Core's "
            f"operator sets {DATA_ROOT_ENV}",
        )
    root = Path(root_text).resolve()
    path = Path(value)
    resolved = (path if path.is_absolute() else root / path).resolve()
    if not resolved.is_relative_to(root):
        raise HTTPException(422, f"{field}: {value!r} is not under the data root ({DATA_ROOT_ENV})")
    return resolved

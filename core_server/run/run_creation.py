"""A new benchmark run in the store: its id and conditions (the run's settings, the adapters
serving it, a robustness run's variants), stored with its records and sessions in one
transaction (inputs.create_run): a run that exists has every one of its sessions, and the
digests of the videos it is bound to (video_binding.py)."""

from __future__ import annotations

import uuid
from typing import Any

from streameval.core.benchmark.records import Benchmark
from streameval.core.config import RunConfig
from streameval.core.run.inputs import create_run
from streameval.core.run.perturb_records import robustness_condition
from streameval.core.store.store import Store
from streameval.variants import CONDITION_KEY


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def store_new_run(
    store: Store,
    config: RunConfig,
    benchmark: Benchmark,
    records: list[dict[str, Any]],
    infos: list[dict | None],
    videos: dict[str, str],
    expected_s: dict[str, float] | None = None,
) -> str:
    """Store a run of `records` (as the store holds them) and return its id; `infos` are
    the endpoints' /info, None for one left out of rotation (its identity is not known);
    `videos` the sha256 of each video that could be read, the bytes the run is bound to;
    `expected_s` the seconds each record's session streams (session_timeline.py)."""
    adapters = [
        {**info, "endpoint": endpoint.url}
        for endpoint, info in zip(config.endpoints, infos, strict=True)
        if info is not None
    ]
    conditions = {"run": config.run_conditions().model_dump(), "adapters": adapters}
    robustness = robustness_condition(config)
    if robustness is not None:
        conditions[CONDITION_KEY] = robustness.model_dump()
    run_id = new_run_id()
    create_run(
        store,
        run_id,
        benchmark=f"{benchmark.name}@{benchmark.version}",
        config=config.model_dump(mode="json"),
        conditions=conditions,
        records=records,
        videos=videos,
        expected_s=expected_s,
    )
    return run_id

"""`streameval plan`: predict a benchmark's makespan on N GPUs (docs/scale.md "Planning an
allocation"; the model is core_server/analyses/makespan_plan.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from streameval.core.cli.common import (
    BenchmarkOption,
    JsonOption,
    RecordChoice,
    StoreOption,
    SubsetOption,
    VideoRootOption,
    console,
    fail,
    first_validation_error,
)
from streameval.core.cli.run_options import (
    FpsOption,
    LimitOption,
    PacingOption,
    ProfileOption,
    QaHistoryOption,
    SpeedOption,
)
from streameval.core.store.locations import resolve_store_url
from streameval.errors import UserError
from streameval.terminal import Column, print_table

if TYPE_CHECKING:
    from streameval.core.analyses.makespan_plan import Plan, ServiceModel
    from streameval.core.config import RunConfig
    from streameval.core.run.perturb_records import Record


def plan(
    gpus: Annotated[
        list[int], typer.Option("--gpus", help="GPUs to plan for (repeatable: one row each).")
    ],
    concurrency: Annotated[int, typer.Option(help="Sessions in flight per GPU.")] = 1,
    from_run: Annotated[
        str | None,
        typer.Option(
            "--from-run",
            help="Plan this stored run's benchmark and conditions, with the cost per session "
            "measured on its finished sessions.",
        ),
    ] = None,
    store: StoreOption = None,
    benchmark: BenchmarkOption = "synthetic",
    video_root: VideoRootOption = None,
    subset: SubsetOption = None,
    limit: LimitOption = None,
    profile: ProfileOption = "trace",
    pacing: PacingOption = "wall_clock",
    speed: SpeedOption = 1.0,
    fps: FpsOption = None,
    qa_history: QaHistoryOption = None,
    per_frame_s: Annotated[
        float, typer.Option("--per-frame-s", min=0.0, help="GPU seconds per frame (prefill).")
    ] = 0.0,
    per_answer_s: Annotated[
        float, typer.Option("--per-answer-s", min=0.0, help="GPU seconds per answer (decode).")
    ] = 0.0,
    overhead_s: Annotated[
        float | None,
        typer.Option(
            "--overhead-s",
            min=0.0,
            help="Seconds per session besides streaming (default 0, or measured by --from-run).",
        ),
    ] = None,
    start_s: Annotated[
        float | None,
        typer.Option(
            "--start-s",
            min=0.0,
            help="Seconds each GPU slot starts late, once: joining the run, its first video "
            "(default 0, or measured by --from-run).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Predict a benchmark's makespan on N GPUs (longest sessions first, as workers claim
    them), so an allocation can be sized before it is asked for (docs/scale.md)."""
    from streameval.core.analyses.makespan_plan import ServiceModel

    model = ServiceModel(per_frame_s, per_answer_s, overhead_s or 0.0, start_s or 0.0)
    try:
        if from_run is not None:
            given = (overhead_s is not None, start_s is not None)
            records, config, model = _from_run(from_run, store, model, given)
        else:
            choice = RecordChoice(benchmark, video_root, subset, 0, None, None, limit)
            records, config = _from_benchmark(choice, profile, pacing, speed, fps, qa_history)
        plans = _plans(records, config, model, gpus, concurrency)
    except UserError as exc:
        raise fail(str(exc)) from None
    except ValueError as exc:  # a RunConfig the options make invalid
        raise fail(first_validation_error(exc)) from None
    _print(plans, model, as_json)


def _plans(records, config, model, gpus: list[int], concurrency: int) -> list[Plan]:
    from streameval.core.analyses.makespan_plan import plan as make_plan

    return [make_plan(records, config, model, n, concurrency) for n in gpus]


def _from_benchmark(
    choice: RecordChoice, profile, pacing, speed, fps, qa_history
) -> tuple[list[Record], RunConfig]:
    from streameval.core.config import RunConfig
    from streameval.core.run.run_records import RunRecords, select_records
    from streameval.progress import NO_PROGRESS

    config = RunConfig(
        endpoints=[], profile=profile, pacing=pacing, speed=speed, fps=fps,
        qa_history_s=qa_history, **choice.config_fields(),
    )  # fmt: skip
    return select_records(RunRecords(config, NO_PROGRESS).load(), config), config


def _from_run(
    run_id: str, store: Path | None, model: ServiceModel, given: tuple[bool, bool]
) -> tuple[list[Record], RunConfig, ServiceModel]:
    """The run's records and conditions; the overhead and the start measured on it, where
    not `given` on the command line."""
    from dataclasses import replace

    from pydantic import TypeAdapter

    from streameval.core.analyses.makespan_plan import measured_costs
    from streameval.core.benchmark.records import Record as AnyRecord
    from streameval.core.config import RunConfig
    from streameval.core.store.store import Store

    with Store(resolve_store_url(store, must_exist=True), read_only=True) as opened:
        config = RunConfig.model_validate(opened.get_run(run_id).config)
        parse = TypeAdapter(AnyRecord).validate_python
        records = [parse(record) for record in opened.records(run_id)]
        sessions = opened.sessions(run_id)
    overhead_s, start_s = measured_costs(records, sessions, config, run_id)
    if not given[0]:
        model = replace(model, overhead_s=overhead_s)
    if not given[1]:
        model = replace(model, start_s=start_s)
    return records, config, model


def _print(plans: list[Plan], model: ServiceModel, as_json: bool) -> None:
    if as_json:
        rows = [
            {
                "gpus": p.gpus,
                "slots": p.slots,
                "sessions": p.sessions,
                "total_s": p.total_s,
                "longest_s": p.longest_s,
                "ideal_s": p.ideal_s,
                "makespan_s": p.makespan_s,
            }  # fmt: skip
            for p in plans
        ]
        costs = {"overhead_s": model.overhead_s, "start_s": model.start_s}
        print(json.dumps({**costs, "plans": rows}))
        return
    columns = [
        Column("GPUs", justify="right"),
        Column("sessions", justify="right"),
        Column("longest (s)", justify="right"),
        Column("ideal (s)", justify="right"),
        Column("makespan (s)", justify="right"),
    ]
    rows = [
        [
            str(p.gpus),
            str(p.sessions),
            f"{p.longest_s:.1f}",
            f"{p.ideal_s:.1f}",
            f"{p.makespan_s:.1f}",
        ]
        for p in plans
    ]
    print_table(console, columns, rows)
    console.print(
        f"overhead per session: {model.overhead_s:.2f} s; start per GPU slot: "
        f"{model.start_s:.2f} s",
        highlight=False,
    )

"""Tables for papers (/table): several runs under one scoring profile as Markdown, LaTeX,
CSV or JSON text, rendered by scorer/paper_table.py from the scored runs the API keeps, the
same text `streameval table` prints."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel

from streameval.scorer.paper_table import (
    PaperTable,
    render_table,
    table_columns,
    table_of,
    table_run_ids,
)
from streameval.scorer.profiles import get_profile
from streameval.scorer.service.routes.params import DEFAULT_PROFILE, ProfileParam
from streameval.scorer.service.routes.state import ScoresDep, StoreDep

router = APIRouter(tags=["metrics"])
Format = Literal["markdown", "latex", "csv", "json"]


class TableText(BaseModel):
    format: Format
    text: str
    table: PaperTable


def _names(listed: str | None) -> list[str] | None:
    return None if not listed else [name.strip() for name in listed.split(",") if name.strip()]


@router.get("/table", response_model=TableText)
def table(
    runs: Annotated[str, Query(description="run ids, comma-separated, in the order of the rows")],
    store: StoreDep,
    scores: ScoresDep,
    profile: ProfileParam = DEFAULT_PROFILE,
    metrics: Annotated[
        str | None,
        Query(description="family.metric names, comma-separated (default: the headlines)"),
    ] = None,
    by: Annotated[
        str | None, Query(description="task_type or source_benchmark: a block per group")
    ] = None,
    intervals: bool = False,
    format: Format = "markdown",
) -> TableText:
    """The runs as rows, the metrics as columns, the best of each column marked, as text in
    one format (`text`) and as data (`table`); 422 for an unknown metric or grouping."""
    chosen = get_profile(profile)
    columns = table_columns(chosen, _names(metrics))
    run_ids = table_run_ids(store, _names(runs) or [])
    scored = [scores.get(run_id, chosen.name) for run_id in run_ids]
    made = table_of(scored, chosen, columns, by=by or None, intervals=intervals)
    return TableText(format=format, text=render_table(made, format), table=made)

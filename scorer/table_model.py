"""What a paper table is (scorer/paper_table.py builds it, scorer/table_formats.py writes
it): columns of metrics, rows of runs (in blocks per group under `by`), each cell a value
with its population, its interval where asked for, and whether it is its column's best."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, computed_field

SCHEMA = "streameval-table/1"


class TableColumn(BaseModel):
    key: str = Field(description="family.metric, as --metrics names it")
    family: str
    metric: str
    unit: str = Field(description="`0-1` for a fraction, else the metric's unit")
    better: Literal["higher", "lower"] | None = Field(
        description="which way the metric improves (None: no best is marked)"
    )


class TableCell(BaseModel):
    value: float | None
    population: int = Field(description="units in the metric's denominator")
    ci95: tuple[float, float] | None = Field(
        default=None, description="bootstrap interval clustered by video (asked for, and known)"
    )
    best: bool = Field(description="the best value of its column within its block")


class TableRow(BaseModel):
    run_id: str
    label: str = Field(description="the adapter (and model) that served the run")
    group: str | None = Field(description="the task type (or source benchmark) under `by`")
    n: int = Field(description="records scored in this row")
    cells: list[TableCell]


class PaperTable(BaseModel):
    schema_version: str = SCHEMA
    profile: str
    profile_version: str
    by: str | None
    intervals: bool
    columns: list[TableColumn]
    rows: list[TableRow]
    notes: list[str] = Field(description="the runs' scoring notes, each prefixed by its runs")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def n(self) -> int | None:
        """The records of every row where all rows have as many (None: they differ)."""
        counts = {row.n for row in self.rows}
        return counts.pop() if len(counts) == 1 else None

    def caption_parts(self) -> list[str]:
        """What the header says: the profile, n, what is marked (each format joins them)."""
        parts = [f"scoring profile {self.profile} v{self.profile_version}"]
        per = "run" if self.by is None else "row"
        parts.append(f"n = {self.n} records per {per}" if self.n is not None else "n per row")
        parts.append("best per column in bold, the arrow saying which way is better")
        if self.intervals:
            parts.append("95% bootstrap intervals clustered by video")
        return parts

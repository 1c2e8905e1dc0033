"""Stream variants of a robustness run: which records are perturbed or negative copies.

A robustness run (`streameval run --perturb ...`, docs/robustness.md) streams every selected
record as the benchmark has it (the clean stream) and again once per variant: a perturbation
the Core applies to the delivered stream (dropped, jittered, duplicated frames...) or a
negative stream (the record's instruction over a stretch of its video with no event). Each
copy is a record of its own, stored with the run, whose id says nothing of the variant: an
adapter sees `record_ids` on the wire, and one that could tell a negative stream from its id
could stay silent on purpose.

This module is the contract between the Core, which writes the run condition
`conditions["robustness"]`, and the scorer, which groups records by it; it belongs to
neither.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

# The key of the run condition in `runs.conditions`, and the group of unperturbed records.
CONDITION_KEY = "robustness"
CLEAN = "clean"

VariantKind = Literal["perturbation", "negative"]
ParamValue = int | float | str


class Variant(BaseModel):
    """One variant of the run: every selected record (every proactive record with room for
    one, for a negative stream) is streamed once more under it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str  # as the user names it, normalised: "drop:p=0.1", "negative"
    kind: VariantKind
    params: dict[str, ParamValue]


class RobustnessCondition(BaseModel):
    """The run condition of a robustness run: its seed, preset and variants. Which record
    is which variant's copy is not listed (thousands of ids): `labels` derives it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    preset: str | None = None
    variants: tuple[Variant, ...]

    def labels(self, record_ids: Iterable[str]) -> dict[str, str]:
        """Each record id -> the label of the variant it was streamed under, or CLEAN."""
        ids = {v.label: v for v in self.variants}
        labels = {}
        for record_id in record_ids:
            base, sep, _ = record_id.rpartition("~")
            found = CLEAN
            if sep:
                for label in ids:
                    if variant_record_id(base, label, self.seed) == record_id:
                        found = label
                        break
            labels[record_id] = found
        return labels

    def base_of(self, record_id: str) -> str:
        """The benchmark record a variant record copies (a clean record is its own)."""
        base, sep, _ = record_id.rpartition("~")
        if sep and any(
            variant_record_id(base, v.label, self.seed) == record_id for v in self.variants
        ):
            return base
        return record_id


def variant_record_id(base_record_id: str, label: str, seed: int) -> str:
    """The id of `base_record_id`'s copy under variant `label`: stable for a seed, and
    opaque (a digest), so that the adapter cannot read the variant from it."""
    digest = hashlib.sha256(f"{label}\n{seed}\n{base_record_id}".encode()).hexdigest()
    return f"{base_record_id}~{digest[:8]}"


def read_condition(conditions: dict) -> RobustnessCondition | None:
    """A run's robustness condition, or None for a run without variants."""
    stored = conditions.get(CONDITION_KEY)
    return None if stored is None else RobustnessCondition.model_validate(stored)

"""The records a robustness run streams: the clean ones, and a copy per variant.

`streamed_records` is derived from the run's configuration and the benchmark alone, so a
resume or a scale-out worker derives the same copies again (same ids, same contents) and
finds each variant record's perturbation without anything more in the store:

    >>> # config.perturbations = ["drop"]
    >>> streamed = streamed_records(selected, config, benchmark.records)
    >>> [r.record_id for r in streamed.records]
    ['qa-1', 'qa-1~3f2a9c01']
    >>> streamed.perturbed["qa-1~3f2a9c01"]
    Perturbed(variant=Variant(label='drop:p=0.1', ...), base_record_id='qa-1')

A perturbation copy is the record under another id (`variant_record_id`): the Core applies
the perturbation to its timeline (perturb.py). A `negative` copy is a record of its own
(negative_streams.py), streamed like any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from streameval.core.benchmark.records import ProactiveRecord, QARecord
from streameval.core.config import RunConfig
from streameval.core.run.negative_streams import negative_records
from streameval.core.streams.perturb_spec import run_variants
from streameval.variants import RobustnessCondition, Variant, variant_record_id

Record = QARecord | ProactiveRecord


@dataclass(frozen=True)
class Perturbed:
    """A record that is a perturbation copy: under which variant, of which record."""

    variant: Variant
    base_record_id: str


@dataclass(frozen=True)
class StreamedRecords:
    records: list[Record]  # each selected record, then its perturbation copies; negatives last
    perturbed: dict[str, Perturbed] = field(default_factory=dict)  # by copy's record id


def robustness_condition(config: RunConfig) -> RobustnessCondition | None:
    """The run condition `conditions["robustness"]`, None for a run without variants."""
    variants = run_variants(config.perturbations, config.robustness)
    if not variants:
        return None
    return RobustnessCondition(
        seed=config.perturb_seed, preset=config.robustness, variants=variants
    )


def streamed_records(
    selected: Sequence[Record], config: RunConfig, benchmark: Sequence[Record]
) -> StreamedRecords:
    """Every record the run streams, for a resolved configuration. `benchmark` is every
    record of the benchmark: a negative stream avoids the events of all of them, also of
    those the selection (`--limit`, `--task-type`) left out."""
    condition = robustness_condition(config)
    if condition is None:
        return StreamedRecords(list(selected))
    seed = condition.seed
    perturbations = [v for v in condition.variants if v.kind == "perturbation"]
    records: list[Record] = []
    perturbed: dict[str, Perturbed] = {}
    for record in selected:
        records.append(record)
        for variant in perturbations:
            copy_id = variant_record_id(record.record_id, variant.label, seed)
            records.append(record.model_copy(update={"record_id": copy_id}))
            perturbed[copy_id] = Perturbed(variant, record.record_id)
    if any(v.kind == "negative" for v in condition.variants):
        assert config.proactive_lead_s is not None  # resolved
        negatives = negative_records(
            selected,
            avoiding=benchmark,
            tolerance_s=config.proactive_tolerance_s,
            seed=seed,
            lead_s=config.proactive_lead_s,
        )
        records += [negative for negative, _base in negatives]
    return StreamedRecords(records, perturbed)

"""A run is bound to its inputs: created whole from records that validate, and resumed only
with the records it was created with.

`create_run` checks every selected record before anything is stored (values JSON cannot
hold, such as NaN or Infinity timestamps, are refused with the record and field), then
stores the run, its records, its sessions and its videos' digests in one transaction: a run
either exists with all of its sessions or not at all. `records_diff` compares the records a
run stored with the benchmark as loaded now, for a resume to refuse a changed file with a
short summary.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from streameval.core.errors import CoreError
from streameval.core.store.store import RunInfo, Store

# How many record ids (and fields) a diff summary names before it says "and N more".
DIFF_NAMES_SHOWN = 5


class RunInputError(CoreError):
    """The benchmark's records cannot make a run, or no longer match a stored run's."""


def _bad_number(value: Any, path: str) -> str | None:
    """The path of the first float JSON cannot hold (NaN, Infinity) inside `value`."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    if isinstance(value, dict):
        for key, item in value.items():
            found = _bad_number(item, f"{path}.{key}" if path else str(key))
            if found:
                return found
    if isinstance(value, list):
        for index, item in enumerate(value):
            found = _bad_number(item, f"{path}[{index}]")
            if found:
                return found
    return None


def check_records(records: Sequence[dict[str, Any]]) -> None:
    """Refuse a record the store could not hold exactly, and records sharing an id (one
    session per record id: the store's unique key would refuse them with a raw database
    error), as RunInputError, one line."""
    counts = Counter(record.get("record_id") for record in records)
    repeated = [str(ident) for ident, count in counts.items() if count > 1]
    if repeated:
        raise RunInputError(
            f"duplicate record id{'s' if len(repeated) > 1 else ''} {_names(repeated)}: "
            "each record of a run needs its own id; fix the benchmark file"
        )
    for record in records:
        bad = _bad_number(record, "")
        if bad is not None:
            raise RunInputError(
                f"record {record.get('record_id')!r}: {bad} is not a finite number; "
                "fix the benchmark file (timestamps must be finite seconds)"
            )
        try:
            json.dumps(record, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RunInputError(
                f"record {record.get('record_id')!r} cannot be stored: {exc}"
            ) from None


def create_run(
    store: Store,
    run_id: str,
    *,
    benchmark: str,
    config: dict[str, Any],
    conditions: dict[str, Any],
    records: Sequence[dict[str, Any]],
    videos: Mapping[str, str] | None = None,
    expected_s: Mapping[str, float] | None = None,
) -> RunInfo:
    """Store the run, its records, one session per record and `videos` (the sha256 of each
    video by name: what the run is bound to) in one transaction, once every record was
    checked (Store.create_run, retried while the store is locked); `expected_s`: each
    record's streamed seconds, by which claims go longest first."""
    check_records(records)
    return store.create_run(
        run_id,
        benchmark,
        config,
        conditions,
        records=records,
        videos=videos or {},
        expected_s=expected_s,
    )


def _normal(record: dict[str, Any]) -> dict[str, Any]:
    """The record as the store hands it back (a JSON round trip: tuples become lists)."""
    return json.loads(json.dumps(record))


def _names(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:DIFF_NAMES_SHOWN])
    more = len(ids) - DIFF_NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = list(old) + [k for k in new if k not in old]
    return [k for k in keys if old.get(k) != new.get(k)]


def records_diff(
    stored: Sequence[dict[str, Any]],
    current: dict[str, dict[str, Any]],
    selected_now: Sequence[str],
) -> str | None:
    """A one-line summary of how the benchmark differs from a run's stored records (None when
    it does not): stored records that are gone or changed (with the fields), and records the
    run's selection takes now that it did not take then."""
    stored_ids = {rec["record_id"] for rec in stored}
    removed = [rec["record_id"] for rec in stored if rec["record_id"] not in current]
    changed: list[str] = []
    for rec in stored:
        now = current.get(rec["record_id"])
        if now is None:
            continue
        fields = _changed_fields(rec, _normal(now))
        if fields:
            changed.append(f"{rec['record_id']} ({', '.join(fields[:DIFF_NAMES_SHOWN])})")
    added = [rid for rid in selected_now if rid not in stored_ids]
    parts = []
    if changed:
        parts.append(f"{len(changed)} changed: {_names(changed)}")
    if removed:
        parts.append(f"{len(removed)} removed: {_names(removed)}")
    if added:
        parts.append(f"{len(added)} added: {_names(added)}")
    return "; ".join(parts) or None

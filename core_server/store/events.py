"""Transitional re-export of the event contract, which now lives in `streameval.events`.

Import from `streameval.events`. This module only keeps working the files that were being
restructured in parallel when the contract moved: core_server/session.py, runner.py,
connection.py, protocol_state.py, recorder.py, sender.py, waiting.py, scorer/report.py and
scorer/metrics/ovo.py. Delete it once they import `streameval.events` themselves.
"""

from __future__ import annotations

from streameval.events import Event, EventKind, FailureCause, failure_cause, probe_task_id

# Plain strings, as before: they end up in SQL columns, where a driver might adapt an enum
# member by its name rather than its value.
INFRASTRUCTURE = FailureCause.INFRASTRUCTURE.value
ADAPTER = FailureCause.ADAPTER.value
INPUT = FailureCause.INPUT.value

__all__ = [
    "ADAPTER",
    "INFRASTRUCTURE",
    "INPUT",
    "Event",
    "EventKind",
    "failure_cause",
    "probe_task_id",
]

"""Why a run refuses to start (RunError, EndpointUnusable) or stops part-way (RunStopped,
RunTakenOver): the errors every part of a run raises and the command line reports."""

from __future__ import annotations

from streameval.core.errors import CoreError


class RunError(CoreError):
    """A run that cannot start (bad configuration, unreachable or incompatible adapter)."""


class EndpointUnusable(RunError):
    """An endpoint that cannot be used: unreachable, not ready, or its /info unusable (not a
    conflict between its conditions and the profile)."""


class RunTakenOver(CoreError):
    """Another Core took this run over (this one stalled past its lease): stop without
    touching the run, which is the other Core's now."""


class RunStopped(CoreError):
    """A run that stopped part-way: every endpoint gone (the run is `interrupted`), the
    store failed (`failed`, where the store still took that), or another Core took it."""

    def __init__(self, message: str, run_id: str) -> None:
        super().__init__(message)
        self.run_id = run_id

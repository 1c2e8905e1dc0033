"""Why a session failed: the stage it reached, one line of reason, and a cause.

Pure data, no I/O. The stage strings are recorded (`session_failed` events, the sessions
table), so a `FailureStage` member's value must never change.
"""

from __future__ import annotations

from streameval.events import FailureStage


class SessionFailure(Exception):
    """Why a session failed: the stage it reached, one line of reason, and the cause.

    `cause` tells failures a rerun may cure from those it will not: `infrastructure` (the
    adapter could not be reached, disconnected or crashed, sent no hello, or did not answer
    within the response timeout), `adapter` (it broke the protocol or WebSocket framing,
    reported a fatal error, speaks another protocol version, names another adapter than its
    /info or declared conditions the profile refuses) or `input` (the record's video or
    timeline is unusable, or its task is too big for one message).
    """

    def __init__(self, stage: FailureStage, reason: str, cause: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason
        self.cause = cause

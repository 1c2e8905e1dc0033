"""The root of the scorer's user errors."""

from __future__ import annotations

from streameval.errors import UserError


class ScoreError(UserError):
    """Scoring cannot proceed; the message names the run, record, profile or file involved."""

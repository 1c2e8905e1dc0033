"""The scorer's one user-facing error type."""

from __future__ import annotations


class ScoreError(Exception):
    """Scoring cannot proceed; the message names the run, record, profile or file involved."""

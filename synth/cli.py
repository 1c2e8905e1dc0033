"""`streameval synth`: build an EvoStreaming trajectory dataset with a served model."""

from __future__ import annotations


def synth() -> None:
    """Synthesise streaming trajectories with a served VideoLLM (docs/synth.md)."""
    raise NotImplementedError

"""`streameval capacity`: concurrent live streams one endpoint holds at a latency target."""

from __future__ import annotations


def capacity() -> None:
    """Concurrent wall-clock sessions one endpoint holds at a latency target."""
    raise NotImplementedError

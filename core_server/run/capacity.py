"""How many sessions one Core can hold at once.

A session holds one WebSocket, so one open file and, towards its endpoint, one local TCP
port. An endpoint's configured concurrency is therefore checked only against the port range
(no more connections to one host:port can exist from one address); what this machine can
hold is decided where the sessions run: the worker raises its open-file limit to the hard
limit and runs at most that many sessions at once, less a reserve for the store, the frame
cache, logs and HTTP probes, spreading the slots over the endpoints in proportion.
"""

from __future__ import annotations

import logging

from streameval.open_files import raise_open_file_limit

# Open files a Core needs besides its sessions' sockets: store, frame reads, logs, probes.
RESERVED_FILES = 256

log = logging.getLogger(__name__)


def session_capacity() -> int:
    """The sessions this process can hold at once (after raising its open-file limit)."""
    return max(1, raise_open_file_limit() - RESERVED_FILES)


def slots_per_endpoint(concurrency: list[int], capacity: int) -> list[int]:
    """Each endpoint's sessions at once: as configured when the total fits in `capacity`,
    else scaled down in proportion (at least one each)."""
    total = sum(concurrency)
    if total <= capacity:
        return list(concurrency)
    scaled = [max(1, wanted * capacity // total) for wanted in concurrency]
    log.warning(
        "the endpoints' concurrency adds up to %d sessions at once; this process can hold "
        "%d (open-file limit %d less %d reserved): running %d at once",
        total,
        capacity,
        capacity + RESERVED_FILES,
        RESERVED_FILES,
        sum(scaled),
    )
    return scaled

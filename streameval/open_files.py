"""The open-file limit, on both sides of the protocol.

Every session is one WebSocket, so one open file in the Core and one in the adapter. The
usual soft limit (1,024) would stop either at about a thousand sessions while the hard limit
allows far more: the Core's workers and the adapter server raise the soft limit to the hard
one before they take sessions.
"""

from __future__ import annotations

import resource

# What "unlimited" counts as: one connection per local port of one address.
UNLIMITED = 65_535 + 256


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return UNLIMITED
    if hard == resource.RLIM_INFINITY or soft >= hard:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):  # a container may refuse it: keep what there is
        return soft
    return hard

"""The root of the Core's user errors (benchmarks, videos, runs, the store, adapters it
starts); every one of them is a `CoreError`.

May import: nothing of the Core.
"""

from streameval.errors import UserError


class CoreError(UserError):
    """A run, benchmark, video or store problem the user can fix."""

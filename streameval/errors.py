"""The root of every error a user can fix: bad input, a bad option, an unreachable service.

Each package has one root below it (`streameval.core.errors.CoreError`,
`streameval.adapters.errors.AdapterSetupError`, `streameval.scorer.errors.ScoreError`), and
the command line catches `UserError` once and prints its message as one line: a user's
mistake never ends in a traceback. Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A problem the user can fix; its message is one line that names it."""

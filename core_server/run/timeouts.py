"""The Core's default timeouts that the command line shows as option defaults.

They live apart from the modules that use them (worker.py, endpoint_health.py) so that
building the command line (`streameval --help`) reads them without importing the store and
the HTTP client those modules need.
"""

DEFAULT_LEASE_S = 60.0  # a run's or a session's lease, renewed every third of it
ALL_DOWN_GIVE_UP_S = 30.0  # every endpoint out of rotation this long: the run stops

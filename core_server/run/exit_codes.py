"""What `streameval run` (and `worker`) exit with; docker/benchmark-job.sh passes them on.

A module of its own so that the command line reads them without importing the runner.
"""

EXIT_FINISHED = 0  # every session of the run finished
EXIT_SOME_FAILED = 1  # some sessions failed
EXIT_CANNOT_START = 2  # the run could not start: bad options, unreachable or changed adapter
EXIT_ALL_FAILED = 3  # every session failed: the run's status is `failed`
EXIT_STOPPED = 4  # the run stopped part-way: every adapter endpoint gone, or the store failed
EXIT_INTERRUPTED = 130  # Ctrl-C; the run is `interrupted` and can be resumed
EXIT_TERMINATED = 143  # SIGTERM (`docker stop`); the run is `interrupted` and can be resumed

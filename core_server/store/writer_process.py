"""The event writer's store calls, made by a process of its own.

Storing an event costs the writer's thread about 90 us of Python (SQLAlchemy's row handling,
JSON encoding), all of it holding the interpreter lock the sessions' event loop needs: with
2,000 wall-clock sessions (4,000 events/s) that was a third of the Core's interpreter time,
and every session's frames waited for it. A child process opened on the same store makes
the writer's two calls instead (`append_rows`, `set_session_status`); the Core only sends
the rows its sessions made and waits for the answer without the lock.

For the writer nothing changes: one call at a time, answered in the order made, each
returning once the child committed it or raising the StoreError the child's store raised
(same message and transience; StoreLost for a SQLite file deleted or replaced). A child that
ended fails the call like a store that failed for good. The child reads the store URL from
its input (never its command line, which anyone may read: the URL may hold a password) and
lives as long as that input is open: it ends when the Core closes it or dies, and ignores
Ctrl-C and SIGTERM, which the Core answers by storing what it queued first.
"""

from __future__ import annotations

import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from streameval.child_process import module_command
from streameval.core.store.store import EventRow, Store, StoreError, StoreLost

# How long `close` waits for the child to store what it was sent and end.
CLOSE_TIMEOUT_S = 60.0


def child_url(store: Store) -> str | None:
    """The URL another process opens to reach the same store; None for an in-memory one."""
    url = store.engine.url
    if url.drivername.startswith("sqlite") and url.database in (None, "", ":memory:"):
        return None
    return url.render_as_string(hide_password=False)


class StoreProcess:
    """`append_rows` and `set_session_status` of the store at `url`, in a child process."""

    def __init__(self, url: str) -> None:
        self._lock = threading.Lock()
        self._child = subprocess.Popen(
            module_command("streameval.core.store.writer_process"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._send(url)

    def append_rows(self, rows: Sequence[EventRow], owner: str | None = None) -> set[str]:
        return self._call(("append", rows, owner))

    def set_session_status(self, run_id: str, session_id: str, status: str, **options: Any) -> bool:
        return self._call(("status", run_id, session_id, status, options))

    def close(self) -> None:
        """Let the child store what it was sent, then end."""
        with self._lock:
            assert self._child.stdin is not None
            try:
                self._child.stdin.close()
                self._child.wait(CLOSE_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                self._child.kill()
                self._child.wait()

    def _send(self, message: object) -> None:
        assert self._child.stdin is not None
        pickle.dump(message, self._child.stdin, pickle.HIGHEST_PROTOCOL)
        self._child.stdin.flush()

    def _call(self, request: tuple[Any, ...]) -> Any:
        with self._lock:
            try:
                self._send(request)
                assert self._child.stdout is not None
                reply = pickle.load(self._child.stdout)
            except (OSError, EOFError, pickle.UnpicklingError):
                code = self._child.poll()
                raise StoreError(f"the store writer process ended (exit code {code})") from None
        if reply[0] == "ok":
            return reply[1]
        _, lost, message, transient = reply
        raise StoreLost(message) if lost else StoreError(message, transient=transient)


def _answer(store: Store, request: tuple[Any, ...]) -> tuple[Any, ...]:
    try:
        if request[0] == "append":
            return ("ok", store.append_rows(request[1], owner=request[2]))
        _, run_id, session_id, status, options = request
        return ("ok", store.set_session_status(run_id, session_id, status, **options))
    except StoreError as exc:
        return ("error", isinstance(exc, StoreLost), str(exc), exc.transient)
    except Exception as exc:  # the writer must hear of any failure, never wait forever
        return ("error", False, f"store writer process: {type(exc).__name__}: {exc}", False)


def _serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    with Store(pickle.load(requests)) as store:
        while True:
            try:
                request = pickle.load(requests)
            except EOFError:
                return
            pickle.dump(_answer(store, request), replies, pickle.HIGHEST_PROTOCOL)
            replies.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()

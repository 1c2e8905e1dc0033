"""A Core started from an empty folder as its own process, for the tests of managed adapters
(tests/test_managed_adapters.py, tests/test_managed_transformers.py): every process of it
carries a mark in its environment (inherited by whatever the Core starts, however deep), so
/proc tells which of them are still alive.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

from streameval.core.store.store import Store
from tests.faults import cli, without_progress

REPO = Path(__file__).resolve().parent.parent
MARK = "STREAMEVAL_TEST_MANAGED_MARK"
STARTED = re.compile(r"adapter replica (\d+) started: pid (\d+) listening on port (\d+)")


class Core:
    """The environment of a Core started from an empty folder, marked so that every process
    it starts can be found."""

    def __init__(self, folder: Path, *, test_adapters: bool = False) -> None:
        self.folder = folder
        self.mark = uuid.uuid4().hex
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("STREAMEVAL_STORE", "PYTHONPATH")
        }
        self.env |= {MARK: self.mark, "STREAMEVAL_CACHE_DIR": str(folder / "cache")}
        if test_adapters:  # the adapters of tests/, imported by the replicas
            self.env["PYTHONPATH"] = str(REPO)
        self.store = f"sqlite:///{folder / 'runs.db'}"
        with Store(self.store):  # created here: a test reads it while the Core writes
            pass

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            cli(*args),
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            cli(*args),
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_interruptible,
        )

    def alive(self) -> list[int]:
        return self.marked(self.mark)

    @staticmethod
    def marked(mark: str) -> list[int]:
        """The processes alive with this mark in their environment (zombies are dead)."""
        needle = f"{MARK}={mark}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if needle in environ and state != "Z":
                found.append(int(entry.name))
        return found

    def log_files(self) -> list[Path]:
        return sorted((self.folder / "cache" / "adapter-logs").glob("*/*.log"))


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def error_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return without_progress(stderr)


def started(log: Path) -> list[tuple[int, int]]:
    """(pid, port) of each start the Core noted in a replica's log."""
    return [(int(pid), int(port)) for _, pid, port in STARTED.findall(log.read_text())]


def one_session_running(store_url: str, core: subprocess.Popen[str]) -> bool:
    assert core.poll() is None, core.communicate()
    with Store(store_url) as store:
        runs = store.list_runs()
        return bool(runs) and any(s.status == "running" for s in store.sessions(runs[0].run_id))


def only_run(store_url: str) -> str:
    with Store(store_url) as store:
        [run] = store.list_runs()
        return run.run_id


def _interruptible() -> None:
    """Ctrl-C as in a terminal: a test process (or the shell that started pytest in the
    background) may ignore SIGINT, and a child inherits that, so Python would install no
    KeyboardInterrupt handler and the Core would never see the test's SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

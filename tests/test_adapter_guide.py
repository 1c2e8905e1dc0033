"""docs/adapter-guide.md works as written: its code copied into a fresh folder, its commands
run there by the `streameval` script (no PYTHONPATH); and a required field left out of an
adapter's conditions is one line naming it."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streameval.adapters.__main__ import READY_PREFIX
from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.registry import load_adapter
from streameval.core.store.store import Store

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "adapter-guide.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
SERVE = "streameval adapter serve my_adapter:"
MODEL_NAME_LINE = '        model_name="my-model",\n'


def guide_files() -> dict[str, str]:
    """The guide's Python blocks that open with a `# FILE.py` comment, by file name."""
    files = {}
    for language, body in FENCE.findall(GUIDE.read_text()):
        first = body.splitlines()[0]
        if language == "python" and re.fullmatch(r"# [\w.]+\.py", first):
            files[first[2:]] = body
    return files


def guide_commands() -> list[str]:
    """The commands of the block that serves my_adapter and runs against it, in order."""
    blocks = [body for language, body in FENCE.findall(GUIDE.read_text()) if language == "bash"]
    (block,) = [body for body in blocks if SERVE in body and "streameval run " in body]
    return block.strip().splitlines()


def fresh_folder(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "my-project"
    folder.mkdir()
    for name, body in files.items():
        (folder / name).write_text(body)
    return folder


def user_env(tmp_path: Path) -> dict[str, str]:
    """A user's shell: `streameval` on PATH, no PYTHONPATH, a cache of this test's own."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["STREAMEVAL_CACHE_DIR"] = str(tmp_path / "cache")
    return env


def serve_on_a_free_port(serve: list[str], folder: Path, env: dict[str, str]) -> tuple:
    """The guide's serve command on port 0 instead of its fixed port (where a user's own adapter
    may be listening): returns the process and the URL it printed once it accepted connections."""
    port = serve.index("--port") + 1
    server = subprocess.Popen(
        [*serve[:port], "0", *serve[port + 1 :]],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in server.stdout:
        if line.startswith(READY_PREFIX):
            return server, line.split()[-1]
    server.wait(timeout=30)
    pytest.fail(f"the adapter exited {server.returncode}: {server.stderr.read()}")


@contextlib.contextmanager
def something_listening_on(port: int) -> Iterator[None]:
    """Whatever a user left on the guide's port (another adapter, say) while the test runs."""
    try:
        listener = socket.create_server(("127.0.0.1", port))
    except OSError:  # already taken: the situation this stands for
        yield
        return
    with listener:
        yield


def test_the_guide_example_runs_as_written_from_a_fresh_folder(tmp_path):
    files = guide_files()
    assert list(files) == ["my_adapter.py"]
    serve, run = (shlex.split(command) for command in guide_commands())
    assert serve[:3] == ["streameval", "adapter", "serve"] and run[:2] == ["streameval", "run"]
    # The run command targets the port the serve command asks for.
    url = run.index("--adapter-url") + 1
    assert run[url] == f"ws://127.0.0.1:{serve[serve.index('--port') + 1]}/ws"
    folder = fresh_folder(tmp_path, files)
    env = user_env(tmp_path)

    with something_listening_on(int(serve[serve.index("--port") + 1])):
        server, listening = serve_on_a_free_port(serve, folder, env)
        try:
            ran = subprocess.run(
                [*run[:url], listening, *run[url + 1 :]],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            server.send_signal(signal.SIGTERM)
            server.communicate(timeout=30)
    assert ran.returncode == 0, ran.stderr
    summary = re.search(r"run (\w+): (\d+) finished, 0 failed", ran.stderr)
    assert summary is not None, ran.stderr
    run_id, finished = summary.group(1), int(summary.group(2))
    assert finished > 0

    with Store(f"sqlite:///{tmp_path / 'cache' / 'streameval.db'}", read_only=True) as store:
        sessions = store.sessions(run_id)
        kinds = [event.kind for event in store.iter_events(run_id)]
    assert {(s.adapter["adapter"], s.adapter["conditions"]["model_name"]) for s in sessions} == {
        ("last-frame", "my-model")
    }
    # Every question got the stand-in model's streamed answer.
    assert kinds.count("response_final") == kinds.count("question_sent") > 0


def test_a_required_condition_left_out_is_one_line_naming_it(tmp_path):
    ((name, body),) = guide_files().items()
    assert MODEL_NAME_LINE in body
    folder = fresh_folder(tmp_path, {name: body.replace(MODEL_NAME_LINE, "")})
    serve = guide_commands()[0]
    line = 1 + body.splitlines().index("    conditions = AdapterConditions(")
    target = shlex.split(serve)[3]

    done = subprocess.run(
        shlex.split(serve), cwd=folder, env=user_env(tmp_path), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: adapter {target!r} ({folder / name}, line {line}): conditions: the field "
        "'model_name' is required (AdapterConditions(model_name=...))"
    ]


def test_a_module_in_no_folder_says_where_it_was_looked_for(tmp_path):
    serve = guide_commands()[0]
    target = shlex.split(serve)[3]
    done = subprocess.run(
        shlex.split(serve), cwd=tmp_path, env=user_env(tmp_path), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: adapter {target!r}: no module 'my_adapter' on the Python path nor in the "
        f"current folder ({tmp_path}); run from the folder that holds my_adapter.py, or add "
        "that folder to PYTHONPATH"
    ]


BROKEN_CONDITIONS = """
from streameval.adapters.sdk import Adapter
from streameval.protocol import AdapterConditions


class PerInstance(Adapter):
    def __init__(self) -> None:
        self.conditions = AdapterConditions(state="native")


class AsMapping(Adapter):
    conditions = {"state": "native", "initiation": "sometimes", "model_name": "m"}


class Undeclared(Adapter):
    pass
"""


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (
            "PerInstance",
            "adapter 'broken_conditions:PerInstance' ({file}, line 8): conditions: the field "
            "'initiation' is required (AdapterConditions(initiation=...))",
        ),
        (
            "AsMapping",
            "adapter AsMapping: conditions: initiation: Input should be 'autonomous', 'polled' "
            "or 'query' (got 'sometimes')",
        ),
        (
            "Undeclared",
            "adapter Undeclared declares no conditions: set `conditions = AdapterConditions(...)`",
        ),
    ],
)
def test_conditions_are_checked_when_the_adapter_loads(cls, message, tmp_path, monkeypatch):
    module = tmp_path / "broken_conditions.py"
    module.write_text(BROKEN_CONDITIONS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the loader adds the current folder
    monkeypatch.delitem(sys.modules, "broken_conditions", raising=False)
    with pytest.raises(AdapterSetupError) as caught:
        load_adapter(f"broken_conditions:{cls}")
    assert str(caught.value) == message.format(file=module)

"""Spread a run over a Slurm job array: each array task is one `streameval worker` next to
its own adapter (deploy/slurm/streameval-worker.sbatch, which documents the settings).

`submit` fills the template's environment variables and calls `sbatch --array`; `wait`
follows the array until every task has ended and says how each ended (through `scontrol`,
so no accounting database is needed, and faster than `sbatch --wait`, which polls at
growing intervals of up to half a minute).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from streameval.core.errors import CoreError

# In a source checkout (the editable install), beside the package's folder (core_server/,
# two levels above this module of core_server/launch/).
DEFAULT_TEMPLATE = (
    Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "streameval-worker.sbatch"
)

# Slurm's job states after which a task runs no more.
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)


class SlurmError(CoreError):
    """Slurm is missing, refused the job, or lost track of it."""


@dataclass(frozen=True)
class TaskEnd:
    """How one array task ended: Slurm's state and the script's exit status."""

    task_id: int
    job_id: str
    state: str
    exit_code: int
    signal: int

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0


def _args_text(args: str | Sequence[str] | None) -> str:
    """Extra command-line words as the shell text the template splits again."""
    if args is None:
        return ""
    return args if isinstance(args, str) else shlex.join(args)


def _default_streameval_bin() -> str | None:
    """The `streameval` of this very installation, so the tasks run the same version."""
    candidate = Path(sys.executable).parent / "streameval"
    return str(candidate) if candidate.is_file() else None


def submit(
    run_id: str | None,
    store_url: str,
    tasks: int,
    *,
    adapter: str = "reference",
    adapter_args: str | Sequence[str] | None = None,
    worker_args: str | Sequence[str] | None = None,
    model_cmd: str | None = None,
    streameval_bin: str | None = None,
    template: Path | str | None = None,
    output: str | None = None,
    sbatch_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    """Submit `tasks` workers for run `run_id` (None: any run in the store) as one job array
    and return its job id. The store must be reachable from every node (PostgreSQL).

    `adapter_args`, `worker_args`: more `adapter serve` / `streameval worker` arguments.
    `model_cmd`: a model server each task starts first (e.g. `vllm serve ... --port
    $MODEL_PORT`). `streameval_bin`: the command on the nodes (default: this installation's).
    `output`: sbatch's --output pattern. `sbatch_args`: more sbatch options (--gres=gpu:1,
    --partition, --time...). `env`: the environment to start from (default: this process's;
    sbatch passes it on to the tasks).
    """
    if tasks < 1:
        raise SlurmError(f"a job array needs at least one task, not {tasks}")
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SlurmError("sbatch not found: run this on a Slurm login node")
    script = Path(template) if template is not None else DEFAULT_TEMPLATE
    if not script.is_file():
        raise SlurmError(
            f"no sbatch template at {script}: pass one (deploy/slurm/streameval-worker.sbatch "
            "in the source tree)"
        )
    variables = dict(os.environ if env is None else env)
    variables.update(
        STREAMEVAL_STORE=store_url,
        ADAPTER=adapter,
        ADAPTER_ARGS=_args_text(adapter_args),
        WORKER_ARGS=_args_text(worker_args),
    )
    for name, value in (
        ("RUN_ID", run_id),
        ("MODEL_CMD", model_cmd),
        ("STREAMEVAL_BIN", streameval_bin or _default_streameval_bin()),
    ):
        # An unset setting must not be inherited from the submitting shell either.
        if value:
            variables[name] = value
        else:
            variables.pop(name, None)
    command = [sbatch, "--parsable", f"--array=0-{tasks - 1}"]
    if output is not None:
        command.append(f"--output={output}")
    command += [*sbatch_args, str(script)]
    done = subprocess.run(command, env=variables, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SlurmError(f"sbatch refused the job: {done.stderr.strip() or done.stdout.strip()}")
    # --parsable prints "JOBID" or "JOBID;CLUSTER".
    job_id = done.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise SlurmError(f"sbatch printed no job id: {done.stdout.strip()!r}")
    return job_id


_FIELD = re.compile(r"(\w+)=(\S*)")


def _task_ids(text: str) -> list[int]:
    """The task ids of one record: "3", or for tasks that never started one range record
    such as "2-5%1" or "1,4-6"."""
    ids: list[int] = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.partition("-")
        ids += range(int(first), int(last or first) + 1)
    return ids


def task_states(job_id: str, env: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """`scontrol show job` of an array: one record per task (or per pending range)."""
    done = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", job_id],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise SlurmError(f"scontrol knows no job {job_id}: {done.stderr.strip()}")
    return [dict(_FIELD.findall(line)) for line in done.stdout.splitlines() if line.strip()]


def wait(
    job_id: str,
    *,
    timeout_s: float | None = None,
    poll_s: float = 0.5,
    env: Mapping[str, str] | None = None,
) -> list[TaskEnd]:
    """Wait until every task of array job `job_id` has ended; return how each did, by task.

    Call it soon after `submit`: the controller forgets ended jobs after MinJobAge (300 s by
    default), and a job it no longer knows raises SlurmError.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        records = task_states(job_id, env)
        if records and all(record.get("JobState") in FINAL_STATES for record in records):
            ends = []
            for record in records:
                code, _, signal = record.get("ExitCode", "0:0").partition(":")
                ends += [
                    TaskEnd(
                        task_id=task_id,
                        job_id=record.get("JobId", job_id),
                        state=record["JobState"],
                        exit_code=int(code or 0),
                        signal=int(signal or 0),
                    )
                    for task_id in _task_ids(record.get("ArrayTaskId", "0"))
                ]
            return sorted(ends, key=lambda end: end.task_id)
        if deadline is not None and time.monotonic() > deadline:
            raise SlurmError(f"job {job_id} still runs after {timeout_s:g} s")
        time.sleep(poll_s)

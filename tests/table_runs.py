"""Real runs for the paper-table tests (tests/test_paper_table.py, tests/test_dashboard_table.py):
the synthetic benchmark (seed 0, 20 records: 16 QA, 4 proactive) streamed by `streameval run`
to three adapters, each a real WebSocket service in its own process:

- `reference` reads the pixels and answers every task right;
- `always` (a baseline) answers every question with its first option and speaks at every
  step: wrong answers and false alarms;
- `FirstOptionReference` (tests/dashboard_adapters.py) watches as the reference does but
  answers every question with its first option.
"""

from __future__ import annotations

import json
import subprocess

from streameval.core.launch.adapter_process import AdapterProcess
from tests.servers import streameval_command

ADAPTERS = ("reference", "always", "tests.dashboard_adapters:FirstOptionReference")


def table_runs(store_url: str, env: dict[str, str]) -> list[str]:
    """The run ids of the three runs, in ADAPTERS order."""
    run_ids = []
    for adapter in ADAPTERS:
        with AdapterProcess(adapter) as process:
            command = streameval_command(
                "run", "--adapter-url", process.url, "--json", "--store", store_url
            )
            done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        run_ids.append(json.loads(done.stdout)["run_id"])
    return run_ids

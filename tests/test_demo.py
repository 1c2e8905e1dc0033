"""`streameval demo`: the whole pipeline on a CPU, the reference adapter in its own process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from urllib.parse import urlparse

from streameval.core.store.store import Store


def test_demo_json_runs_the_pipeline_with_a_separate_adapter_process(tmp_path):
    store_url = f"sqlite:///{tmp_path / 'demo.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "demo", "--json", "--store", store_url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"run_id", "store", "metrics"}
    overall = result["metrics"]["overall"]
    # The reference adapter reads pixels only, and answers every synthetic task right.
    assert (overall["qa"]["accuracy"]["value"], overall["qa"]["accuracy"]["population"]) == (
        1.0,
        16,
    )
    assert overall["qa"]["invalid_output_rate"]["value"] == 0.0
    proactive = overall["proactive"]
    assert (proactive["in_window_accuracy"]["value"], proactive["miss_rate"]["value"]) == (1.0, 0.0)
    assert proactive["false_alarm_rate"]["value"] == 0.0
    assert proactive["in_window_accuracy"]["population"] == 15  # windows of 4 records

    with Store(store_url) as store:
        run = store.get_run(result["run_id"])
        assert run.status == "finished"
        assert [a["adapter"] for a in run.conditions["adapters"]] == ["reference"]
        endpoints = {s.endpoint for s in store.sessions(run.run_id)}
    # Every session went over one loopback WebSocket endpoint of a process that the demo
    # started and stopped: nothing listens there any more.
    (endpoint,) = endpoints
    url = urlparse(endpoint)
    assert (url.scheme, url.hostname, url.path) == ("ws", "127.0.0.1", "/ws")
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", url.port)) != 0


def test_demo_prints_a_readable_table(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "streameval.cli",
            "demo",
            "--store",
            f"sqlite:///{tmp_path}/d.db",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "accuracy" in done.stdout and "false" in done.stdout.lower()
    assert "20 sessions finished, 0 failed" in " ".join(done.stdout.split())
    # The next steps close it, one command a line: none reads as piped into another.
    lines = done.stdout.splitlines()
    (run_id,) = [line.split()[-1] for line in lines if line.startswith("event log: ")]
    assert lines[-4:] == [
        f"units, scales and meanings: streameval score {run_id} --explain",
        f"scores as JSON: streameval score {run_id} --json",
        f"event log: streameval export {run_id}",
        "dashboard: streameval results-api, then open http://127.0.0.1:8800/",
    ]


def test_demo_with_sound_runs_synthetic_av_and_hears_every_answer(tmp_path):
    """`demo --modalities video,audio` (issue 37's check): the synthetic benchmark with its
    sound tasks, all right; docs/adapter-guide.md, "What synthetic-av adds: sound"."""
    store_url = f"sqlite:///{tmp_path / 'demo.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", "demo", "--json", "--store", store_url]
        + ["--modalities", "video,audio"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    overall = result["metrics"]["overall"]
    accuracy, windows = overall["qa"]["accuracy"], overall["proactive"]["in_window_accuracy"]
    assert (accuracy["value"], accuracy["population"]) == (1.0, 24)
    assert (windows["value"], windows["population"]) == (1.0, 21)
    assert overall["proactive"]["false_alarm_rate"]["value"] == 0.0
    with Store(store_url) as store:
        run = store.get_run(result["run_id"])
        assert run.benchmark == "synthetic-av@1+seed.0"
        assert run.config["modalities"] == ["video", "audio"]

"""Terminal output at 80 columns: the demo, `runs`, `profiles` and `score` run as real
`streameval` processes in a pseudo-terminal of 80 columns (COLUMNS unset, so rich reads the
terminal's size) and never cut a run id, a metric or a profile name, nor print a line wider
than the terminal. And every metric any profile reports has its unit, scale and meaning.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from streameval.core.config import PROTOCOL_PROFILES
from streameval.core.store.store import Store
from streameval.scorer.metrics.explain import explain, family_glossary, glossary
from streameval.scorer.metrics.registry import FAMILIES
from streameval.scorer.profiles import SCORING_PROFILES
from streameval.scorer.report import score_run
from streameval.terminal import Column, print_table
from tests.terminal import plain, read_terminal, sized_terminal

WIDTH = 80


def _command() -> list[str]:
    """The installed `streameval` script next to this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("streameval")
    return [str(script)] if script.exists() else [shutil.which("streameval") or "streameval"]


def in_terminal(*args: str, columns: int = WIDTH, timeout: float = 300) -> list[str]:
    """Run `streameval ARGS` on a pseudo-terminal of `columns` x 50; its screen lines
    (stdout and stderr, control sequences removed; a carriage return starts a line too)."""
    leader, follower = sized_terminal(columns)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    child = subprocess.Popen(
        [*_command(), *args],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=env,
        start_new_session=True,
    )
    os.close(follower)
    try:
        shown = read_terminal(leader, timeout)
    finally:
        os.close(leader)
        code = child.wait(timeout=timeout)
    screen = plain(shown)
    assert code == 0, screen
    return re.split(r"\r\n|\n|\r", screen)


def assert_fits(lines: list[str], width: int = WIDTH) -> None:
    wide = [line for line in lines if cell_len(line) > width]
    assert not wide, f"lines wider than {width} columns: {wide}"


def whole_on_a_line(name: str, lines: list[str]) -> bool:
    """Whether the name appears on some line as itself, not as part of a longer name."""
    pattern = re.compile(rf"(?<![\w.@:/-]){re.escape(name)}(?![\w@:/-])")
    return any(pattern.search(line) for line in lines)


@dataclass
class Demo:
    store: str
    run_id: str
    lines: list[str]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    store = f"sqlite:///{tmp_path_factory.mktemp('demo') / 'd.db'}"
    lines = in_terminal("demo", "--store", store)
    (hint,) = [line for line in lines if line.startswith("event log: streameval export ")]
    return Demo(store, hint.split()[-1], lines)


def overall_metrics(demo: Demo, observed: bool = False) -> dict[str, list[str]]:
    """Each family's metrics in the demo's score output; with `observed`, only those with a
    population (compare leaves out a metric neither run observed: the demo's adapter
    reports no shared prefix, so its `prefix_share` has none)."""
    done = subprocess.run(
        [*_command(), "score", demo.run_id, "--json", "--store", demo.store],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    overall = json.loads(done.stdout)["overall"].items()
    return {
        family: [name for name, value in m.items() if value["population"] or not observed]
        for family, m in overall
    }


def metric_row(name: str, lines: list[str]) -> list[str]:
    """The cells of the table row of this metric (split at runs of spaces), each with what
    it wrapped onto the lines below (they start blank): how many digits the measured times
    take decides whether a cell wraps, so the row must read the same either way."""
    (at,) = [k for k, line in enumerate(lines) if line.startswith(f"{name} ")]
    cells = [[m.start(), m.end(), m.group()] for m in re.finditer(_CELL, lines[at])]
    for line in lines[at + 1 :]:
        if not line.startswith(" ") or not line.strip():
            break
        for part in re.finditer(_CELL, line):
            (cell,) = [c for c in cells if c[0] < part.end() and part.start() < c[1]]
            cell[2] += " " + part.group()
    return [text for _, _, text in cells]


_CELL = re.compile(r"\S+(?: \S+)*")  # words one space apart; cells are two or more apart


def test_the_demo_shows_every_metric_whole_with_its_unit_in_80_columns(demo: Demo) -> None:
    assert_fits(demo.lines)
    metrics = overall_metrics(demo)
    assert set(metrics) == {"qa", "proactive", "workload"}
    for family, names in metrics.items():
        for name in names:
            assert whole_on_a_line(name, demo.lines), f"{family}.{name} is cut"
    # The reference adapter answers every synthetic task right: 16 QA records, 15 windows.
    invalid = ["invalid_output_rate", "0", "0-1", "[0, 0]", "16/16 records"]
    assert metric_row("invalid_output_rate", demo.lines) == invalid
    missed = ["miss_rate", "0", "0-1", "[0, 0]", "15/15 windows"]
    assert metric_row("miss_rate", demo.lines) == missed
    assert metric_row("ttft_s_p50", demo.lines)[2] == "s"
    assert metric_row("ttft_s_p95", demo.lines)[2] == "s"  # p50 and p95 told apart
    assert "20 sessions finished, 0 failed" in demo.lines
    # The next steps, one command a line: none reads as a pipe into the next.
    (at,) = [k for k, line in enumerate(demo.lines) if line.startswith("units, scales")]
    assert demo.lines[at : at + 4] == [
        f"units, scales and meanings: streameval score {demo.run_id} --explain",
        f"scores as JSON: streameval score {demo.run_id} --json",
        f"event log: streameval export {demo.run_id}",
        "dashboard: streameval results-api, then open http://127.0.0.1:8800/",
    ]


def test_runs_shows_the_whole_run_id_in_80_columns(demo: Demo) -> None:
    lines = in_terminal("runs", "--store", demo.store)
    assert_fits(lines)
    assert demo.run_id in lines  # its block starts with the id, alone on its line
    assert whole_on_a_line("synthetic@1+seed.0", lines)
    sessions = in_terminal("runs", "--store", demo.store, demo.run_id)
    assert_fits(sessions)
    for session in ("synthetic:qa:000", "synthetic:proactive:003"):
        assert session in sessions


def test_profiles_fit_80_columns_with_every_name_whole() -> None:
    lines = in_terminal("profiles")
    assert_fits(lines)
    # Both kinds, each under its heading, a block per profile headed by its name.
    protocol = lines.index("Protocol profiles (for run and capacity): how a run streams the video")
    scoring = lines.index("Scoring profiles (for score, compare and report): how a run is scored")
    assert 0 <= protocol < scoring
    for name in PROTOCOL_PROFILES:
        assert name in lines[protocol:scoring]
    for name in SCORING_PROFILES:
        assert name in lines[scoring:]
    assert "  fps 1 · QA history 10 s · proactive lead 5 s · pacing any" in lines
    assert "  version 2 · for protocols realstream" in lines
    profiles = len(PROTOCOL_PROFILES) + len(SCORING_PROFILES)
    assert len([line for line in lines if line.strip()]) <= 2 + 6 * profiles


def test_score_and_its_explanations_fit_80_columns(demo: Demo) -> None:
    lines = in_terminal("score", demo.run_id, "--store", demo.store, "--explain")
    assert_fits(lines)
    metrics = overall_metrics(demo)
    for names in metrics.values():
        for name in names:
            assert whole_on_a_line(name, lines), name
    assert "  false_alarm_rate · fraction (0-1) · 0-1, lower is better" in lines
    assert "coverage · observed/population" in [line.strip() for line in lines]
    compared = in_terminal("compare", demo.run_id, demo.run_id, "--store", demo.store)
    assert_fits(compared)
    for names in overall_metrics(demo, observed=True).values():
        for name in names:
            assert whole_on_a_line(name, compared), name
    assert metric_row("accuracy", compared) == ["accuracy", "1", "1", "0", "[0, 0]", "0-1"]


def test_every_metric_of_every_profile_is_explained(demo: Demo) -> None:
    with Store(demo.store, read_only=True) as store:
        for name in SCORING_PROFILES:
            scores = score_run(store, demo.run_id, name)
            for family, metrics in scores.overall.items():
                for metric in metrics:
                    assert explain(f"{family}.{metric}") is not None, (name, family, metric)
                    assert explain(metric) is not None, (name, metric)
    # What a profile can report, whatever the run: each family's declared statistics.
    for profile in SCORING_PROFILES.values():
        both = profile.with_overrides(response_delay_clocks=("runtime", "video"))
        for family in profile.families:
            for metric in FAMILIES[family].statistics(both):
                help = explain(f"{family}.{metric}")
                assert help is not None and help.name == metric, (profile.name, family, metric)
    explained = {(f, h.name) for f, helps in family_glossary().items() for h in helps}
    declared = {
        (family, metric)
        for profile in SCORING_PROFILES.values()
        for family in profile.families
        for metric in FAMILIES[family].statistics(
            profile.with_overrides(response_delay_clocks=("runtime", "video"))
        )
    }
    assert explained == declared  # no help for a metric nobody reports either


def test_explanations_agree_with_the_metric_definitions() -> None:
    early = explain("readiness.early_penalty")
    assert early is not None and early.scale == "0-1, 1 = no penalty (higher is better)"
    assert explain("realstream.early_penalty_rate").scale == "0-1, lower is better"
    assert explain("ttft_s_p95").meaning.endswith(
        "the 95th percentile over the records where it was observed"
    )
    assert explain("latency_s_p50").meaning.startswith("response latency")
    # A name reported by several families: qualified, each its own; bare, the first (qa).
    assert explain("streamingbench.accuracy").unit == "%"
    assert explain("readiness.accuracy").unit == "fraction (0-1)"
    assert explain("accuracy") == explain("qa.accuracy")
    assert explain("realstream.score").unit == "%"
    assert explain("nope") is None and explain("nope.accuracy") is None
    assert len({(h.name, h.meaning) for h in glossary()}) == len(glossary())


def test_score_explain_without_a_run_prints_the_glossary() -> None:
    done = subprocess.run(
        [*_command(), "score", "--explain", "--json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert list(printed) == list(family_glossary())
    assert printed["qa"]["ttft_s_p50"] == {
        "unit": "s",
        "scale": "seconds, lower is better",
        "meaning": "time to first token, from the question's arrival to the answer's first "
        "token: the median over the records where it was observed",
    }


# ------------------------------------------------------------------ the table helper


def printed(width: int, columns: list[Column], rows: list) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_table(console, columns, rows)
    return "\n".join(line.rstrip() for line in console.file.getvalue().splitlines())


def test_a_table_that_fits_is_a_table_and_one_that_does_not_becomes_blocks() -> None:
    columns = [Column("metric", key=True), Column("value", justify="right"), Column("note")]
    rows = ["qa", ["median_response_delay_runtime_s", "0.25", "seconds on the Core clock"]]
    assert printed(80, columns, rows) == (
        "metric                           value  note\n"
        f"{'─' * 66}\n"
        "qa\n"
        "median_response_delay_runtime_s   0.25  seconds on the Core clock"
    )
    assert printed(40, columns, rows) == (
        "qa\n"
        "  median_response_delay_runtime_s\n"
        "    value 0.25 · note seconds on the\n"
        "    Core clock"
    )

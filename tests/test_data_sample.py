"""`streameval data sample`: each format's sample validates, and the commands it prints,
run as printed against the reference adapter in its own process, score what the sample's
records imply.

The reference adapter reads the generated frames; every question of the sample is one of
the synthetic benchmark's templates, so it answers each QA right and says each count change
and colour state on time. OVO-Bench's REC probes ask how often an activity was done, which
it does not read: what it says to them is taken from the policy itself, in process.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streameval.adapters.reference_policy import ReferencePolicy
from streameval.core.benchmark.loader import import_path
from streameval.core.benchmark.ovo_bench import CATEGORIES
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Record
from streameval.core.cli.data import REFERENCE_URL, data_app
from streameval.core.launch.adapter_process import AdapterProcess
from streameval.scorer.metrics.ovo import category_of, count_correct

runner = CliRunner()
TITLES = ("TRACE release", "OVO-Bench", "StreamingBench QA", "StreamingBench proactive")


@dataclass
class Sample:
    root: Path
    printed: str

    def commands(self, title: str) -> list[list[str]]:
        """The commands printed under `# title`, split as a shell would."""
        lines = self.printed.splitlines()
        start = lines.index(f"# {title}") + 1
        block = []
        for line in lines[start:]:
            if not line.startswith("streameval "):
                break
            block.append(shlex.split(line))
        return block


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Sample:
    root = tmp_path_factory.mktemp("sample") / "my sample"  # a space: the commands quote it
    done = runner.invoke(data_app, ["sample", str(root)])
    assert done.exit_code == 0, done.output
    return Sample(root, done.stdout)


@pytest.fixture(scope="module")
def reference() -> Iterator[str]:
    with AdapterProcess("reference") as adapter:
        yield adapter.url


def test_the_sample_prints_three_commands_per_format(sample: Sample) -> None:
    for title in TITLES:
        validate, run, score = sample.commands(title)
        assert validate[:3] == ["streameval", "data", "validate"]
        assert run[:2] == ["streameval", "run"] and REFERENCE_URL in run
        assert score[:3] == ["streameval", "score", "RUN_ID"]
        assert validate[3] == run[run.index("--benchmark") + 1]
        assert Path(validate[3]).exists()


@pytest.mark.parametrize("title", TITLES)
def test_each_format_validates_without_a_problem(sample: Sample, title: str) -> None:
    validate, _, _ = sample.commands(title)
    done = runner.invoke(data_app, [*validate[2:], "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert (report["ok"], report["problems"], report["warnings"]) == (True, [], [])
    assert report["notes"] == []  # the TRACE release has a manifest: checksums verified
    assert report["videos_checked"] >= 1
    imported = import_path(Path(validate[3]), video_root=sample.root)
    assert report["records"] == len(imported.benchmark.records) > 0


def test_the_formats_use_each_importer(sample: Sample) -> None:
    formats = {}
    for title in TITLES:
        path = Path(sample.commands(title)[0][3])
        benchmark = import_path(path).benchmark
        formats[title] = (benchmark.name, sorted({r.task for r in benchmark.records}))
    assert formats == {
        "TRACE release": ("trace", ["proactive", "qa"]),
        "OVO-Bench": ("ovo_bench", ["proactive", "qa"]),
        "StreamingBench QA": ("streamingbench-real", ["qa"]),
        "StreamingBench proactive": ("streamingbench-proactive", ["proactive"]),
    }


# ----------------------------------------------------------------------------- end to end


def streameval(command: list[str], env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "streameval.cli", *command[1:], "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def expected_scores(records: list[Record]) -> dict[tuple[str, str], tuple[float, int]]:
    """(family, metric) -> (value, population) for the reference adapter, by profile family."""
    qa = [r for r in records if isinstance(r, QARecord)]
    proactive = [r for r in records if isinstance(r, ProactiveRecord)]
    source = records[0].source_benchmark
    if source == "trace":
        windows = sum(len(r.triggers) for r in proactive)
        return {
            ("qa", "accuracy"): (1.0, len(qa)),
            ("proactive", "in_window_accuracy"): (1.0, windows),
            ("proactive", "false_alarm_rate"): (0.0, windows),
        }
    if source == "ovo_bench":
        return _expected_ovo(records)
    items = len(qa) + sum(len(r.triggers) for r in proactive)
    return {("streamingbench", "accuracy"): (100.0, items)}


def _expected_ovo(records: list[Record]) -> dict[tuple[str, str], tuple[float, int]]:
    """QA right; a REC probe right only when the digits of the policy's reply are its count
    (the policy has no reading of the probe questions: it says "Unable to answer"). As
    OVO-Bench's script counts: a task over its questions pooled (a forward record's probes
    one by one), a category the mean of its tasks, the total the mean of the categories."""
    scores: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in records:
        task = scores[category_of(record)][record.task_type]
        if isinstance(record, QARecord):
            task.append(100.0)
        else:
            policy = ReferencePolicy()
            said = [(policy.answer(p.question, p.options), p.answer) for p in record.probes]
            task.extend(100.0 * count_correct(reply, count) for reply, count in said)
    means = {c: statistics.fmean(map(statistics.fmean, t.values())) for c, t in scores.items()}
    assert set(means) == set(CATEGORIES)  # the sample has each category
    expected = {("ovo", c): (mean, sum(map(len, scores[c].values()))) for c, mean in means.items()}
    questions = sum(population for _mean, population in expected.values())
    expected[("ovo", "total")] = (statistics.fmean(means.values()), questions)
    return expected


@pytest.mark.parametrize("title", TITLES)
def test_the_printed_commands_run_and_score_what_the_records_imply(
    sample: Sample, reference: str, title: str, tmp_path: Path
) -> None:
    env = {**os.environ, "STREAMEVAL_CACHE_DIR": str(tmp_path / "cache")}
    env["STREAMEVAL_STORE"] = f"sqlite:///{tmp_path / 'store.db'}"
    validate, run, score = sample.commands(title)
    ran = streameval([reference if arg == REFERENCE_URL else arg for arg in run], env)
    records = list(import_path(Path(validate[3]), video_root=sample.root).benchmark.records)
    assert (ran["status"], ran["finished"], ran["failed"]) == ("finished", len(records), 0)

    scored = streameval([ran["run_id"] if arg == "RUN_ID" else arg for arg in score], env)
    assert scored["profile"]["name"] == score[score.index("--profile") + 1]
    for (family, metric), (value, population) in expected_scores(records).items():
        got = scored["overall"][family][metric]
        assert (got["value"], got["population"]) == (pytest.approx(value), population), metric


def test_the_reference_adapter_misses_only_the_rec_probes(sample: Sample) -> None:
    """What the printed note says: OVO-Bench's forward category is 0, its total 66.67."""
    records = import_path(Path(sample.commands("OVO-Bench")[0][3])).benchmark.records
    expected = _expected_ovo(list(records))
    assert expected[("ovo", "forward")][0] == 0.0
    assert f"total {expected[('ovo', 'total')][0]:.2f}" in " ".join(sample.printed.split())
    assert [r.task_type for r in records if isinstance(r, ProactiveRecord)] == ["REC"]


def test_sample_refuses_a_file_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.write_text("x")
    done = runner.invoke(data_app, ["sample", str(target)])
    assert done.exit_code == 2
    assert done.stderr.strip() == f"error: {target} exists and is not a folder"

"""score_run and score_exported agree; the CLI; comparisons; profile overrides; bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streameval.cli import app
from streameval.core.benchmark.loader import import_path
from streameval.core.benchmark.records import Benchmark, ProactiveRecord, QARecord, Trigger
from streameval.core.benchmark.synthetic import generate
from streameval.core.store.export import export_jsonl
from streameval.core.store.store import Store
from streameval.scorer.compare import compare_runs, compare_sources
from streameval.scorer.errors import ScoreError
from streameval.scorer.eventlog import SessionLog, asked_session, memory_source, store_run
from streameval.scorer.profiles import SCORING_PROFILES, ProfileError, get_profile
from streameval.scorer.report import evaluate_source, score_exported, score_run, scores_of
from tests.test_import_ovo import OVO_FILE

runner = CliRunner()


def mixed_records() -> list[QARecord | ProactiveRecord]:
    qa = [
        QARecord(
            record_id=f"qa-{i}",
            source_id=f"v{i % 2}",
            source_benchmark="ovo-bench" if i else "streamingbench",
            task_type="EPM" if i < 2 else "OCR",
            video_path=f"v{i % 2}.mp4",
            question="Which colour?",
            options=("A. red", "B. blue", "C. green"),
            answer="B",
            question_time_s=12.0,
            evidence_anchor_s=8.0,
        )
        for i in range(3)
    ]
    proactive = [
        ProactiveRecord(
            record_id=f"pro-{task_type}",
            source_id="v2",
            source_benchmark="ovo-bench",
            task_type=task_type,
            video_path="v2.mp4",
            instruction="Tell me each new step.",
            instruction_time_s=0.0,
            triggers=(
                Trigger(trigger_type="event_onset", answer="1", point_s=5.0),
                Trigger(
                    trigger_type="state_interval",
                    answer="2",
                    interval_start_s=9.0,
                    interval_end_s=12.0,
                ),
            ),
        )
        for task_type in ("REC", "SSR")
    ]
    return [*qa, *proactive]


def mixed_logs(run_id: str, records, answers: tuple[str, str, str], said: str) -> list[SessionLog]:
    """QA answers per record ("" = the session fails); proactive: `said` at 6 s and 10 s."""
    logs = []
    for rec, answer in zip(records[:3], answers, strict=True):
        log = SessionLog(run_id, rec.record_id).start()
        for t in range(2, 13):
            log.frame(float(t), ack=True)
            log.workload([log.frame_id(t - 2)])
        log.question(rec)
        if answer:
            log.respond(answer, output_tokens=3)
            log.finish()
        else:
            log.fail("response", "no answer within 60s")
        logs.append(log)
    for rec in records[3:]:
        log = SessionLog(run_id, rec.record_id).start()
        for t in range(15):
            log.frame(float(t))
            log.workload([log.frame_id(t)])
            if t == 0:
                log.instruction(rec)
            log.step()
            if t in (6, 10):
                log.respond(said if t == 6 else "2", output_tokens=1)
            else:
                log.silent()
        log.finish()
        logs.append(log)
    return logs


def mixed_run(
    store: Store,
    run_id: str,
    answers=("B", "The answer is B", ""),
    said="1",
    keep: set[str] | None = None,
    video: str | None = None,
) -> None:
    """The mixed records run; only the records `keep` names, if given; all on one `video`,
    if given."""
    records = mixed_records()
    if video is not None:
        records = [record.model_copy(update={"video_path": video}) for record in records]
    logs = mixed_logs(run_id, records, answers, said)
    if keep is not None:
        records = [record for record in records if record.record_id in keep]
        logs = [log for log in logs if log.session_id in keep]
    store_run(
        store,
        run_id,
        records,
        logs,
        config={"profile": "trace", "pacing": "logical", "proactive_tolerance_s": 5.0},
    )


@pytest.fixture
def sqlite_store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        yield store


def test_store_and_export_give_identical_scores(store: Store, tmp_path: Path) -> None:
    mixed_run(store, "run-a")
    path = tmp_path / "run-a.jsonl"
    with path.open("w") as handle:
        export_jsonl(store, "run-a", handle)
    for name in SCORING_PROFILES:
        stored = score_run(store, "run-a", name).to_json(include_records=True)
        exported = score_exported(path, name).to_json(include_records=True)
        assert stored == exported, name
    scores = score_run(store, "run-a")
    assert scores.events_scored == store.count_events("run-a")
    qa = scores.overall["qa"]
    assert (qa["accuracy"].value, qa["completion_rate"].value) == (
        pytest.approx(2 / 3),
        pytest.approx(2 / 3),
    )
    proactive = scores.overall["proactive"]
    # Each record: "1" at 6 s in [5, 9), "2" at 10 s in the state [9, 12): all four correct.
    assert proactive["in_window_accuracy"].value == 1.0
    # TRACE's delay is on the runtime clock; trace-extended adds it in video seconds.
    assert proactive["median_response_delay_runtime_s"].observed == 4
    extended = score_run(store, "run-a", "trace-extended").overall["proactive"]
    assert extended["median_response_delay_video_s"].value == 1.0
    assert scores.overall["workload"]["submitted_images"].value == 3 * 11 + 2 * 15
    assert scores.by_task_type["OCR"]["qa"]["accuracy"].value == 0.0
    assert scores.by_source_benchmark["streamingbench"]["qa"]["accuracy"].value == 1.0
    assert scores.conditions["config"]["pacing"] == "logical"
    assert scores.judge.kind == "exact" and scores.judge.fallback
    assert scores.judge.semantic == 2  # the SSR record's two in-window answers


def test_tolerance_override_is_recorded() -> None:
    profile = get_profile("trace-paper-v1").with_overrides(tolerance_s=10.0)
    assert profile.overrides == {"tolerance_s": 10.0}
    assert profile.constants()["tolerance_s"] == 10.0
    with pytest.raises(ProfileError, match="no constant"):
        profile.with_overrides(tolerance=3)
    with pytest.raises(ProfileError, match="positive"):
        profile.with_overrides(tolerance_s=0)
    with pytest.raises(ProfileError, match="unknown scoring profile 'paper'"):
        get_profile("paper")


def test_a_tolerance_other_than_the_runs_is_noted(sqlite_store: Store) -> None:
    mixed_run(sqlite_store, "run-a")
    wide = get_profile("trace-paper-v1").with_overrides(tolerance_s=10.0)
    scores = score_run(sqlite_store, "run-a", wide)
    assert scores.profile.overrides == {"tolerance_s": 10.0}
    assert any("tolerance 5 s; scored with 10 s" in note for note in scores.notes)


def test_compare_pairs_records(sqlite_store: Store) -> None:
    mixed_run(sqlite_store, "run-a")
    mixed_run(sqlite_store, "run-b", answers=("C", "The answer is B", "B"), said="one")
    comparison = compare_runs(sqlite_store, "run-a", "run-b")
    assert (comparison.paired_records, comparison.only_in_a, comparison.only_in_b) == (5, 0, 0)
    accuracy = comparison.overall["qa"]["accuracy"]
    assert (accuracy.a, accuracy.b, accuracy.diff) == (
        pytest.approx(2 / 3),
        pytest.approx(2 / 3),
        0.0,
    )
    in_window = comparison.overall["proactive"]["in_window_accuracy"]
    assert (in_window.a, in_window.b, in_window.diff) == (1.0, 0.5, -0.5)
    completion = comparison.overall["qa"]["completion_rate"]
    assert completion.diff == pytest.approx(1 / 3)
    assert comparison.by_task_type["OCR"]["qa"]["accuracy"].diff == 1.0


def test_runs_of_different_protocols_are_shown_side_by_side_never_subtracted() -> None:
    records = mixed_records()[:1]
    logs = [asked_session(records[0], "B", [29.0, 30.0])]
    trace_run = memory_source(records, logs, run_id="a")
    realstream = {"profile": "realstream", "pacing": "logical"}
    other = memory_source(records, logs, run_id="b", config=realstream)
    comparison = compare_sources(trace_run, other)
    accuracy = comparison.overall["qa"]["accuracy"]
    assert (accuracy.a, accuracy.b, accuracy.diff, accuracy.ci95) == (1.0, 1.0, None, None)
    assert all(
        metric.diff is None for family in comparison.overall.values() for metric in family.values()
    )
    assert comparison.notes == [
        "the runs were made under different protocol profiles (trace and realstream): no "
        "metric is subtracted; both values are shown"
    ]


def test_a_run_served_by_two_adapter_identities_says_so() -> None:
    records = mixed_records()[:3]
    logs = []
    for record, version in zip(records, ("1", "1", "2"), strict=True):
        log = SessionLog("run", record.record_id).start(adapter_version=version)
        log.frame(30.0)
        log.question(record)
        log.respond("B")
        log.finish()
        logs.append(log)
    scores = scores_of(evaluate_source(memory_source(records, logs), "trace-paper-v1"))
    assert [(a.adapter_version, a.sessions) for a in scores.adapters] == [("1", 2), ("2", 1)]
    assert (
        "this run mixes 2 adapter identities (resumed with --allow-adapter-change): "
        "handwritten 1 (handwritten): 2 sessions; handwritten 2 (handwritten): 1 session"
    ) in scores.notes


def test_sessions_must_match_records(sqlite_store: Store) -> None:
    records = mixed_records()[:1]
    sqlite_store.create_run("odd", "handwritten", {})
    sqlite_store.add_records("odd", [records[0].model_dump(mode="json")])
    sqlite_store.add_sessions("odd", [("stray", ["stray"])])
    log = SessionLog("odd", "stray").start()
    sqlite_store.append_events(log.events)
    with pytest.raises(ScoreError, match="session 'stray' matches no record"):
        score_run(sqlite_store, "odd")


# --- the command line ------------------------------------------------------------------------


def test_cli_scores_a_run_and_its_export_alike(sqlite_store: Store, tmp_path: Path) -> None:
    mixed_run(sqlite_store, "run-a")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stored = runner.invoke(app, ["score", "run-a", "--store", url, "--json"])
    assert stored.exit_code == 0, stored.output
    path = tmp_path / "run-a.jsonl"
    with path.open("w") as handle:
        export_jsonl(sqlite_store, "run-a", handle)
    exported = runner.invoke(app, ["score", "--events", str(path), "--json"])
    assert exported.exit_code == 0, exported.output
    assert json.loads(stored.stdout) == json.loads(exported.stdout)
    assert "records" not in json.loads(stored.stdout)
    with_records = runner.invoke(app, ["score", "run-a", "--store", url, "--json", "--records"])
    assert len(json.loads(with_records.stdout)["records"]) == 5
    table = runner.invoke(app, ["score", "run-a", "--store", url, "--profile", "realstream"])
    assert table.exit_code == 0
    assert "in_window_accuracy" in table.stdout and "realstream" in table.stdout


def test_cli_compare(sqlite_store: Store, tmp_path: Path) -> None:
    mixed_run(sqlite_store, "run-a")
    mixed_run(sqlite_store, "run-b", said="one")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = runner.invoke(app, ["compare", "run-a", "run-b", "--store", url, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["overall"]["proactive"]["in_window_accuracy"]["diff"] == -0.5
    shown = runner.invoke(app, ["compare", "run-a", "run-b", "--store", url])
    assert "5 paired records" in shown.stdout


def ci_cells(table: str) -> dict[str, str]:
    """The 95% CI cell of each metric row of a score table (one line per row at 120
    columns; the cell after the unit)."""
    cells = {}
    for line in table.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0].islower() and words[2] in ("0-1", "count", "s", "tokens"):
            cells[words[0]] = " ".join(words[3:5]) if words[3].startswith("[") else words[3]
    return cells


def test_a_metric_drawn_from_one_video_has_no_interval_in_table_or_json(
    sqlite_store: Store, tmp_path: Path, monkeypatch
) -> None:
    # QA records on videos v0 and v1, proactive ones on v2 only: the proactive metrics draw
    # on one video, though the slice holds three (once shown as a degenerate [1, 1]).
    mixed_run(sqlite_store, "run-a")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("COLUMNS", "120")
    body = json.loads(runner.invoke(app, ["score", "run-a", "--store", url, "--json"]).stdout)
    overall = body["overall"]
    # Accuracy 2/3 over two videos: resamples give 1/2 (v0 twice), 2/3 or 1 (v1 twice).
    assert overall["qa"]["accuracy"]["ci95"] == [0.5, 1.0]
    assert overall["workload"]["submitted_images"]["ci95"] == [33.0, 90.0]
    proactive = overall["proactive"]
    assert proactive["in_window_accuracy"]["value"] == 1.0
    assert {name: metric["ci95"] for name, metric in proactive.items()} == dict.fromkeys(
        proactive, None
    )
    table = runner.invoke(app, ["score", "run-a", "--store", url]).stdout
    cells = ci_cells(table)
    assert (cells["accuracy"], cells["in_window_accuracy"], cells["miss_rate"]) == (
        "[0.5, 1]",
        "-",
        "-",
    )
    # A run of one video: no metric has an interval.
    mixed_run(sqlite_store, "one-video", video="v0.mp4")
    body = json.loads(runner.invoke(app, ["score", "one-video", "--store", url, "--json"]).stdout)
    assert body["overall"]["qa"]["accuracy"]["value"] == pytest.approx(2 / 3)
    intervals = [m["ci95"] for family in body["overall"].values() for m in family.values()]
    assert intervals == [None] * 35


def test_a_difference_drawn_from_one_video_has_no_interval(sqlite_store: Store) -> None:
    mixed_run(sqlite_store, "run-a")
    mixed_run(sqlite_store, "run-b", answers=("C", "The answer is B", "B"), said="one")
    overall = compare_runs(sqlite_store, "run-a", "run-b").overall
    assert overall["qa"]["completion_rate"].ci95 == (0.0, 0.5)
    in_window = overall["proactive"]["in_window_accuracy"]
    assert (in_window.diff, in_window.ci95) == (-0.5, None)


def benchmark_run(store: Store, run_id: str, benchmark: Benchmark) -> None:
    """A run of every record of a benchmark, named as the Core names it; no session ran."""
    records = list(benchmark.records)
    store_run(store, run_id, records, [], benchmark=f"{benchmark.name}@{benchmark.version}")


def test_compare_refuses_runs_that_share_no_record_in_one_line(
    sqlite_store: Store, tmp_path: Path
) -> None:
    benchmark_run(sqlite_store, "synth", generate(tmp_path / "synthetic"))
    benchmark_run(sqlite_store, "ovo", import_path(OVO_FILE).benchmark)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    for shape in ([], ["--json"]):
        result = runner.invoke(app, ["compare", "synth", "ovo", "--store", url, *shape])
        assert result.exit_code == 2
        assert result.output.splitlines() == [
            "error: runs synth (benchmark synthetic@1+seed.0) and ovo (benchmark "
            "ovo_bench@sha256:04b496ebccd0c154) share no record: nothing to compare"
        ]


def test_compare_of_runs_sharing_some_records_says_how_many_are_left_out(
    sqlite_store: Store, tmp_path: Path
) -> None:
    mixed_run(sqlite_store, "run-a")
    mixed_run(sqlite_store, "run-c", keep={"qa-2", "pro-REC", "pro-SSR"})
    comparison = compare_runs(sqlite_store, "run-a", "run-c")
    assert (comparison.paired_records, comparison.only_in_a, comparison.only_in_b) == (3, 2, 0)
    note = (
        "the runs share 3 of their records, which are compared; left out: 2 of the 5 of run "
        "run-a and 0 of the 3 of run run-c"
    )
    # run-a's SSR answers fall back to exact match, which TRACE counts as incomplete.
    assert comparison.notes == [
        note,
        "judge-incomplete: TRACE's judge rules mark semantic task types scored by exact match "
        "(no judge endpoint) as incomplete",
    ]
    assert comparison.overall["qa"]["accuracy"].population_a == 1
    url = f"sqlite:///{tmp_path / 'store.db'}"
    shown = runner.invoke(app, ["compare", "run-a", "run-c", "--store", url])
    assert shown.exit_code == 0
    assert f"note: {note}" in " ".join(shown.stdout.split())


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["score", "nope"], "unknown run id 'nope'"),
        (["score"], "give either a RUN_ID or --events FILE.jsonl"),
        (["score", "run-a", "--events", "x.jsonl"], "give either a RUN_ID or --events"),
        (["score", "run-a", "--profile", "paper"], "unknown scoring profile 'paper'"),
        (["score", "run-a", "--tolerance", "-1"], "tolerance_s must be positive"),
        (["score", "--events", "/no/such/file.jsonl"], "does not exist"),
        (["score", "run-a", "--judge-url", "ftp://judge"], "must start with http"),
        (["score", "run-a", "--judge-url", "http://127.0.0.1:9/v1"], "needs a model name"),
        (["score", "run-a", "--judge-model", "m"], "--judge-model needs --judge-url"),
        (["compare", "run-a", "nope"], "unknown run id 'nope'"),
        (["results-api", "--store", "mysql://db/x"], "unknown store URL scheme 'mysql'"),
    ],
)
def test_cli_errors_are_one_line_and_exit_2(
    sqlite_store: Store, tmp_path: Path, monkeypatch, arguments: list[str], message: str
) -> None:
    mixed_run(sqlite_store, "run-a")
    monkeypatch.setenv("STREAMEVAL_STORE", f"sqlite:///{tmp_path / 'store.db'}")
    monkeypatch.delenv("STREAMEVAL_JUDGE_URL", raising=False)
    monkeypatch.delenv("STREAMEVAL_JUDGE_MODEL", raising=False)
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_cli_rejects_a_malformed_export(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "event"}\n')
    result = runner.invoke(app, ["score", "--events", str(path)])
    assert result.exit_code == 2
    assert "line 1: the first line must be the run line" in " ".join(result.output.split())


def test_scoring_imports_without_fastapi() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['fastapi'] = None; sys.modules['uvicorn'] = None\n"
        "import streameval.scorer.report, streameval.scorer.compare\n"
        "import streameval.scorer.service.timeline, streameval.scorer.service.cli\n"
        "print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr

"""An export is whole or it is refused: `streameval export` writes under a temporary name and
renames it (a killed or failed export leaves no file at its destination), and ends with a
line counting what it wrote, which `streameval score --events` checks (core_server/store/
export_file.py, core_server/store/export.py, scorer/exported.py).

The faults are real: a `streameval export` process SIGKILLed while it writes, one whose file
size limit makes its writes fail, files cut at a line boundary and in the middle of a line.
"""

from __future__ import annotations

import json
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streameval.core.store.export import NO_END_LINE, ExportFormatError, read_jsonl
from streameval.core.store.store import Store
from streameval.scorer.errors import ScoreError
from streameval.scorer.eventlog import asked_session, store_run
from streameval.scorer.report import score_exported
from tests.test_scorer_exported import mixed_export, write
from tests.test_scorer_report import mixed_records

BIG_FRAMES = 60_000  # events enough that an export takes seconds, even on a fast machine
# The big run's other events: hello, start, question, response (start, delta, final), end,
# finished.
BIG_EVENTS = BIG_FRAMES + 8
QA_0_ENDS = 190  # the mixed export's lines up to qa-0's last event: qa-1 and qa-2 are cut off


def cli(*args: str, **options) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streameval.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        **options,
    )


def refusal(path: Path, problem: str) -> str:
    """What `score --events` prints for an incomplete export."""
    return (
        f"error: {path} is incomplete: {problem}; export the run again, or pass "
        "--allow-partial to score what it holds\n"
    )


def big_store(tmp_path: Path) -> str:
    """A run of one QA session of BIG_FRAMES frames; its store's URL."""
    record = mixed_records()[0]
    url = f"sqlite:///{tmp_path / 'big.db'}"
    with Store(url) as store:
        store_run(store, "run", [record], [asked_session(record, "B", range(BIG_FRAMES))])
    return url


def mixed_store(tmp_path: Path) -> tuple[str, Path, list[str]]:
    """The mixed run's store URL, its export and the export's lines."""
    url = f"sqlite:///{tmp_path / 'mixed.db'}"
    with Store(url) as store:
        path, lines = mixed_export(store, tmp_path)
    return url, path, lines


def partial_with_events(folder: Path, export: subprocess.Popen[str]) -> Path:
    """The export's temporary file, once it holds event lines (past the header's few
    hundred bytes): the export is then mid-write. Fails if the export ended first."""
    while export.poll() is None:
        for candidate in folder.glob("*.partial"):
            if candidate.stat().st_size > 100_000:
                return candidate
        time.sleep(0.002)
    raise AssertionError(f"the export ended (exit {export.returncode}) before it was killed")


def test_a_killed_export_leaves_no_file_at_its_destination(tmp_path: Path) -> None:
    url = big_store(tmp_path)
    folder = tmp_path / "exports"
    folder.mkdir()
    destination = folder / "run.jsonl"
    export = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streameval.cli",
            "export",
            "run",
            "--store",
            url,
            "-o",
            str(destination),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    left = partial_with_events(folder, export)
    export.send_signal(signal.SIGKILL)
    assert export.wait() == -signal.SIGKILL
    assert not destination.exists()
    assert [p.name for p in folder.iterdir()] == [
        f"run.jsonl.{socket.gethostname()}-{export.pid}.partial"
    ]
    assert left.stat().st_size > 100_000
    # What the killed export left is refused, whether it ends mid-line or not.
    scored = cli("score", "--events", str(left))
    assert (scored.returncode, scored.stderr) == (2, refusal(left, NO_END_LINE))
    assert scored.stdout == ""

    # The next export to the destination removes the abandoned file and finishes.
    again = cli("export", "run", "--store", url, "-o", str(destination))
    assert again.returncode == 0, again.stderr
    assert again.stderr == f"exported {1 + 1 + 1 + BIG_EVENTS + 1} lines\n"  # run ... end
    assert [p.name for p in folder.iterdir()] == ["run.jsonl"]
    lines = destination.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1]) == {
        "type": "end",
        "runs": 1,
        "sessions": 1,
        "events": BIG_EVENTS,
    }


def limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


def test_an_export_whose_writes_fail_leaves_the_destination_as_it_was(tmp_path: Path) -> None:
    """Writes past a 20 kB file size limit fail (EFBIG): one line, exit 2, the earlier file
    at the destination untouched and no temporary file left."""
    url, path, _ = mixed_store(tmp_path)
    assert path.stat().st_size > 40_000
    folder = tmp_path / "exports"
    folder.mkdir()
    destination = folder / "run.jsonl"
    destination.write_text("an earlier export\n")
    result = cli(
        "export", "run-a", "--store", url, "-o", str(destination), preexec_fn=limit_file_size
    )
    assert (result.returncode, result.stderr) == (
        2,
        f"error: cannot write {destination}: File too large\n",
    )
    assert [p.name for p in folder.iterdir()] == ["run.jsonl"]
    assert destination.read_text() == "an earlier export\n"

    unknown = cli("export", "nope", "--store", url, "-o", str(destination))
    assert unknown.returncode == 2 and "unknown run id 'nope'" in unknown.stderr
    assert [p.name for p in folder.iterdir()] == ["run.jsonl"]
    assert destination.read_text() == "an earlier export\n"


def test_an_export_to_stdout_ends_with_its_end_line(tmp_path: Path) -> None:
    url, path, lines = mixed_store(tmp_path)
    result = cli("export", "run-a", "--store", url, "-o", "-")
    assert result.returncode == 0
    assert result.stdout.splitlines() == lines
    assert json.loads(lines[-1]) == {"type": "end", "runs": 1, "sessions": 5, "events": 257}
    assert result.stderr == f"exported {len(lines)} lines\n"


# --- score --events: incomplete exports are refused, or scored and said to be partial --------


def test_an_export_cut_at_a_line_boundary_is_refused(tmp_path: Path) -> None:
    _, path, lines = mixed_store(tmp_path)
    cut = write(tmp_path / "cut.jsonl", lines[:QA_0_ENDS])
    result = cli("score", "--events", str(cut))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == refusal(cut, NO_END_LINE)
    assert result.stderr == (
        f"error: {cut} is incomplete: it has no end line, so lines may be missing from its "
        "end (the export was cut short, or was written by an older streameval, whose exports "
        "end without one); export the run again, or pass --allow-partial to score what it "
        "holds\n"
    )
    with pytest.raises(ExportFormatError) as info:
        read_jsonl(cut)
    assert str(info.value) == f"{cut} is incomplete: {NO_END_LINE}"


def test_with_allow_partial_a_cut_export_is_scored_and_said_to_be_partial(
    tmp_path: Path,
) -> None:
    _, path, lines = mixed_store(tmp_path)
    cut = write(tmp_path / "cut.jsonl", lines[:QA_0_ENDS])
    result = cli("score", "--events", str(cut), "--allow-partial", "--json")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert scores["partial"] == f"{cut} is incomplete: {NO_END_LINE}"
    # qa-0 answered right; qa-1 (right too) and qa-2 (failed) were cut off, so not run.
    assert scores["overall"]["qa"]["accuracy"]["value"] == pytest.approx(1 / 3)
    assert scores["sessions"] == {
        "finished": 3,
        "failed": 0,
        "incomplete": 0,
        "not_run": 2,
        "failed_infrastructure": 0,
    }
    assert scores["events_scored"] == QA_0_ENDS - 11
    whole = json.loads(cli("score", "--events", str(path), "--json").stdout)
    assert "partial" not in whole
    assert whole["overall"]["qa"]["accuracy"]["value"] == pytest.approx(2 / 3)

    table = cli("score", "--events", str(cut), "--allow-partial")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0] == (
        "partial: scored with --allow-partial from an incomplete export, so these numbers "
        f"cover only the lines it holds: {cut} is incomplete: {NO_END_LINE}"
    )


def test_an_export_cut_mid_line_is_incomplete_not_malformed(tmp_path: Path) -> None:
    _, path, lines = mixed_store(tmp_path)
    text = "\n".join(lines[:QA_0_ENDS]) + "\n" + lines[QA_0_ENDS][:40]
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text, encoding="utf-8")
    with pytest.raises(ScoreError) as info:
        score_exported(cut)
    assert str(info.value) == refusal(cut, NO_END_LINE)[len("error: ") : -1]
    partial = score_exported(cut, allow_partial=True)
    assert partial.partial == f"{cut} is incomplete: {NO_END_LINE}"
    assert partial.events_scored == QA_0_ENDS - 11
    # Cut inside the header: the same.
    header = tmp_path / "header.jsonl"
    header.write_text("\n".join(lines[:3]) + "\n" + lines[3][:30], encoding="utf-8")
    assert score_exported(header, allow_partial=True).sessions.not_run == 2


def test_an_export_whose_counts_differ_is_refused(tmp_path: Path) -> None:
    _, path, lines = mixed_store(tmp_path)
    missing = write(tmp_path / "missing.jsonl", lines[:150] + lines[151:])
    result = cli("score", "--events", str(missing))
    counts = (
        "its end line counts 1 run, 5 sessions and 257 events, but it holds 1 run, 5 sessions "
        "and 256 events"
    )
    assert (result.returncode, result.stderr) == (2, refusal(missing, counts))
    assert score_exported(missing, allow_partial=True).partial == (
        f"{missing} is incomplete: {counts}"
    )
    without_session = write(tmp_path / "session.jsonl", lines[:6] + lines[7:])
    with pytest.raises(
        ScoreError,
        match="1 run, 5 sessions and 257 events, but it holds 1 run, 4 sessions and 257 events",
    ):
        score_exported(without_session)
    with pytest.raises(ExportFormatError, match="but it holds 1 run, 4 sessions"):
        read_jsonl(without_session)


def test_an_older_export_without_an_end_line_is_refused_unless_allowed(tmp_path: Path) -> None:
    """What an older streameval wrote: every line, no end line."""
    _, path, lines = mixed_store(tmp_path)
    older = write(tmp_path / "older.jsonl", lines[:-1])
    result = cli("score", "--events", str(older))
    assert (result.returncode, result.stderr) == (2, refusal(older, NO_END_LINE))
    assert "written by an older streameval" in result.stderr
    allowed = score_exported(older, allow_partial=True).to_json(include_records=True)
    complete = score_exported(path).to_json(include_records=True)
    assert allowed.pop("partial") == f"{older} is incomplete: {NO_END_LINE}"
    assert allowed == complete


def test_a_complete_export_scores_alike_with_allow_partial(tmp_path: Path) -> None:
    _, path, _ = mixed_store(tmp_path)
    assert score_exported(path, allow_partial=True).to_json(include_records=True) == score_exported(
        path
    ).to_json(include_records=True)


def test_lines_after_the_end_line_are_refused(tmp_path: Path) -> None:
    _, path, lines = mixed_store(tmp_path)
    after = write(tmp_path / "after.jsonl", [*lines, lines[200]])
    with pytest.raises(ScoreError) as info:
        score_exported(after)
    assert str(info.value) == f"{after}: line {len(lines) + 1}: a line cannot follow the end line"
    with pytest.raises(ExportFormatError) as info:
        read_jsonl(after)
    assert str(info.value) == (
        f"{after}: line {len(lines) + 1}: a event line cannot follow the end line"
    )
    bad_end = write(tmp_path / "bad_end.jsonl", [*lines[:-1], '{"type": "end", "runs": 1}'])
    with pytest.raises(ScoreError) as info:
        score_exported(bad_end)
    assert str(info.value) == (
        f"{bad_end}: line {len(lines)}: end line lacks field(s) sessions, events"
    )


def test_allow_partial_needs_an_export() -> None:
    result = cli("score", "run-a", "--allow-partial")
    assert (result.returncode, result.stderr) == (
        2,
        "error: --allow-partial applies to --events FILE.jsonl only (a stored run is whole)\n",
    )

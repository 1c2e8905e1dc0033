"""`streamingbench` agrees with StreamingBench's published scorer (`src/data/count.py`) on
fresh runs of StreamingBench questions.

How this is checked. Each StreamingBench question file (the fixtures in
tests/fixtures/streamingbench, and the public samples in ../shared/data/streamingbench where
present: real, omni, sqa and proactive) is run end to end through the Core under the
`streamingbench-polling` protocol, on stand-in videos, against `ScriptedAdapter`
(tests/wire_adapters.py) in two rounds, so each question gets two of these answers in turn:
- QA: bare letters, `(B)`, `Option B`, `Answer: D`, `**B**`, `B. <option text>`, think
  blocks, role lines, full-width punctuation, lower case, leading and trailing spaces, silence
  tokens, an empty answer and a declined question.
- Proactive: the expected output on time, in other case and spacing, after a think block or
  a role line, at the ±2 s boundaries and past them, after a silence token, after a wrong
  early answer, or never.
From each exported event log, `count_py` below builds the output file StreamingBench's own
evaluation would have written (each question's response; a proactive question's dialog
history ending at its first answer, or at its last poll, 4 s past the ground truth) and
scores it with count.py's rules, written out again here from the published script, sharing
no code with scorer/: a multiple-choice answer is right when its first character equals the
gold letter; an empty answer is skipped (count.py crashes on one in its real and omni parts:
it is counted here as the profile reports it); a proactive answer is on time within ±2 s of
the ground truth (its `HH:MM:SS` read as count.py reads it) and right when on time and the
ground-truth output is a substring of it. Per question and per task type (count.py's rows;
real and omni also pool a `total` row) the profile must agree exactly, and scoring the same
runs with `streamingbench-extended` must not.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import QARecord, Record
from streameval.core.store.store import Store
from streameval.scorer.report import RunScores, score_exported
from tests.scripted_runs import scripted_run
from tests.test_data_cli import stand_in_videos
from tests.test_import_trace import FIXTURES, SAMPLES

PARTS = ("real", "omni", "sqa", "proactive")
ROUNDS = 2
POLL_PAST_TRUTH_S = 4  # StreamingBench polls up to the ground truth + 4 s
EXTENDED_SILENCE = ("wait", "silent", "<silent>")  # the profile's silence tokens

# ----------------------------------------------------------------------------- the script


def qa_texts(gold: str, option: str) -> list[str | None]:
    """What the adapter says to a question whose gold letter is `gold` (None: declines)."""
    wrong = "A" if gold != "A" else "B"
    return [
        gold,
        wrong,
        f"({gold})",
        f"Option {gold}",
        "Answer: D",
        f"**{gold}**",
        option,  # "B. the option's text"
        f"<think>{wrong}?</think>{gold}",
        f"<think>so it is {gold}</think>\n{wrong}",
        f"assistant\n{gold}",
        f"{gold}\nuser\n{wrong}",
        f"（{gold}）",  # full-width parentheses
        f"Answer：{gold}",  # full-width colon
        f"{gold}：",
        gold.lower(),
        f" {gold}",
        f"{gold}  ",
        f"  {gold.lower()} . ",
        "",
        None,
        "wait",
        "Silent.",
        "<silent>",
        f"I think {gold}",
        "A cat",
        "E",
    ]


def proactive_steps(truth: float, output: str, case: int) -> list[tuple[float, str]]:
    """(video time, text) around the ground-truth time, one of StreamingBench's cases."""
    return [
        [(truth, output)],
        [(truth, f"  {output.upper()}  ")],
        [(truth, output.lower().replace(" ", "  "))],
        [(truth - 1, "wait"), (truth + 1, f"now: {output}")],
        [(truth + 3, output)],  # late
        [(truth - 2, f"the answer is {output}")],  # on the early boundary
        [(truth + 2, output)],  # on the late boundary
        [(truth - 6, "not yet, but soon"), (truth, output)],  # the first answer is wrong
        [(truth, f"<think>is it {output}?</think>{output}")],
        [],  # never answers
        [(truth - 1, "Silent."), (truth + 1, f"{output}！")],
        [(truth + 1, f"assistant\n{output}")],
        [(truth, f"<think>no</think>\n{output.upper()}")],
    ][case % 13]


def script(records: list[Record], offset: int) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    for position, record in enumerate(records, start=offset):
        if isinstance(record, QARecord):
            gold = record.answer
            option = record.options[ord(gold) - ord("A")]
            texts = qa_texts(gold, option)
            entries[record.record_id] = {"answer": texts[position % len(texts)]}
        else:
            (trigger,) = record.triggers
            entries[record.record_id] = {
                "steps": proactive_steps(trigger.start_s, trigger.answer, position)
            }
    return entries


# ----------------------------------------------------------------------------- the oracle
# count.py's rules, written out again from the published script.


def clock(stamp: str) -> int:
    """count.py's reading of "HH:MM:SS": integer base-60 digits from the right."""
    return sum(int(part) * 60**power for power, part in enumerate(reversed(stamp.split(":"))))


@dataclass
class Said:
    onset_t: float
    text: str = ""
    closed: bool = False


@dataclass
class Session:
    question_seen: bool = False
    episodes: list[Said] = field(default_factory=list)  # after the question or instruction


def read_sessions(lines: list[dict]) -> dict[str, Session]:
    sessions: dict[str, Session] = {}
    for line in lines:
        if line["type"] != "event":
            continue
        session = sessions.setdefault(line["session_id"], Session())
        kind, payload = line["kind"], line["payload"]
        if kind in ("question_sent", "instruction_sent"):
            session.question_seen = True
        elif kind == "response_start" and session.question_seen:
            session.episodes.append(Said(line["video_t"]))
        elif kind == "response_delta" and session.episodes:
            session.episodes[-1].text += payload["text"]
        elif kind == "response_final" and session.episodes:
            session.episodes[-1].text = payload["text"]
            session.episodes[-1].closed = True
    return sessions


def is_silence(text: str) -> bool:
    """The polling protocol's "no" (the profiles' silence rule, not count.py's): nothing,
    or a silence token once think blocks and a leading role line are gone."""
    text = re.sub(r"<think>.*?</think>", " ", text, flags=re.S)
    text = re.sub(r"^\s*(assistant|user|system)\s*\n", "", text)
    core = " ".join(text.lower().split()).rstrip(".! ")
    return core == "" or core in EXTENDED_SILENCE


def response(session: Session) -> str:
    """The question's response as StreamingBench stores it: the last one ("" for none)."""
    if not session.episodes or not session.episodes[-1].closed:
        return ""
    return session.episodes[-1].text


def dialog_end(session: Session, truth: int) -> tuple[float, str]:
    """(time, content) of the last entry of StreamingBench's dialog history: the first
    answer, or the "no" of the last poll."""
    for said in sorted(session.episodes, key=lambda said: said.onset_t):
        if said.closed and not is_silence(said.text):
            return said.onset_t, said.text
    return truth + POLL_PAST_TRUTH_S, "no"


@dataclass
class Oracle:
    items: dict[str, dict[str, Any]] = field(default_factory=dict)  # per record
    rows: dict[str, dict[str, int]] = field(default_factory=dict)  # count.py's stats
    excluded: int = 0


def count_py(part: str, data: list, sessions: dict[str, Session]) -> Oracle:
    oracle = Oracle()
    stats: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    entries = (
        [((i, j), entry) for i, group in enumerate(data) for j, entry in enumerate(group)]
        if part == "sqa"
        else [((i,), entry) for i, entry in enumerate(data)]
    )
    for position, entry in entries:
        for index, question in enumerate(entry["questions"]):
            record_id = "streamingbench:" + "/".join(map(str, (part, *position, index)))
            session, task = sessions[record_id], question["task_type"]
            if part == "proactive":
                truth = clock(question["ground_truth_time_stamp"])
                last_time, content = dialog_end(session, truth)
                on_time = -2 <= last_time - truth <= 2
                hit = on_time and question["ground_truth_output"] in content
                stats[task]["total"] += 1
                stats[task]["time_correct"] += on_time
                stats[task]["answer_correct"] += hit
                oracle.items[record_id] = {"on_time": on_time, "hit": hit}
                continue
            answer = response(session)
            if not answer:  # sqa skips it; real and omni would crash on answer[0]
                oracle.excluded += 1
                oracle.items[record_id] = {"parsed": None, "excluded": True, "correct": False}
                continue
            first, right = answer[0], answer[0] == question["answer"]
            stats[task]["total"] += 1
            stats[task]["correct"] += right
            if part != "sqa":
                stats["total"]["total"] += 1
                stats["total"]["correct"] += right
            oracle.items[record_id] = {"parsed": first, "excluded": False, "correct": right}
    oracle.rows = {task: dict(counts) for task, counts in stats.items()}
    return oracle


# ----------------------------------------------------------------------------- the runs


@dataclass
class Scored:
    part: str
    oracle: Oracle
    exported: Path
    scores: RunScores
    texts: list[str | None]  # what was said (QA) or the dialog's last content (proactive)


def run_file(original: Path, root: Path, offset: int) -> list[Scored]:
    """The file's questions run ROUNDS times, each export scored by the profile and by
    count_py; the script's texts start at position `offset` of their cycles."""
    part = next(part for part in PARTS if part in original.name)
    root.mkdir()
    path = root / original.name
    shutil.copy(original, path)
    data = json.loads(path.read_text())
    benchmark = load_benchmark(str(path), root / "cache")
    stand_in_videos(benchmark, root)
    records = list(benchmark.records)
    done = []
    with Store(f"sqlite:///{root / 'store.db'}") as store:
        for round_ in range(ROUNDS):
            entries = script(records, offset + round_ * len(records))
            exported, lines = scripted_run(
                store,
                root,
                f"round{round_}",
                entries,
                concurrency=8,
                benchmark=str(path),
                cache_dir=str(root / "cache"),
                profile="streamingbench-polling",
            )
            sessions = read_sessions(lines)
            oracle = count_py(part, data, sessions)
            texts = [entries[r.record_id].get("answer") for r in records]
            if part == "proactive":
                texts = [_said(sessions[r.record_id]) for r in records]
            scores = score_exported(exported, "streamingbench")
            done.append(Scored(part, oracle, exported, scores, texts))
    return done


def _said(session: Session) -> str | None:
    return next((said.text for said in session.episodes if said.closed), None)


def run_files(directory: Path, suffix: str, root: Path) -> list[Scored]:
    """Each part's question file run in turn, the texts' cycles going on from file to file."""
    done: list[Scored] = []
    for part in PARTS:
        file = directory / f"questions_{part}{suffix}.json"
        offset = sum(len(scored.oracle.items) for scored in done)
        done += run_file(file, root / file.stem, offset)
    return done


@pytest.fixture(scope="module")
def fixture_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Scored]:
    return run_files(FIXTURES / "streamingbench", "", tmp_path_factory.mktemp("sb-fidelity"))


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory: pytest.TempPathFactory) -> list[Scored]:
    directory = SAMPLES / "streamingbench"
    if not directory.exists():
        pytest.skip(f"real benchmark samples not found at {directory} (not in the repo)")
    return run_files(directory, "_sample", tmp_path_factory.mktemp("sb-fidelity-sample"))


# ----------------------------------------------------------------------------- agreement


def disagreements(scored: Scored, scores: RunScores) -> list[str]:
    """Where `scores` departs from count.py's per-question results and per-task rows."""
    found = []
    keys = ("on_time", "hit") if scored.part == "proactive" else ("parsed", "excluded", "correct")
    for record in scores.records:
        sb = record.streamingbench
        got = (
            {"on_time": sb["targets"][0]["on_time"], "hit": sb["targets"][0]["hit"]}
            if scored.part == "proactive"
            else {key: sb[key] for key in keys}
        )
        if got != scored.oracle.items[record.record_id]:
            found.append(f"{record.record_id}: {got} != {scored.oracle.items[record.record_id]}")
    for task, row in scored.oracle.rows.items():
        if task == "total":  # real and omni pool every counted question
            family = scores.overall["streamingbench"]
        else:
            family = scores.by_task_type[task]["streamingbench"]
        if scored.part == "proactive":
            expected = {
                "proactive_accuracy": (100 * row["answer_correct"] / row["total"], row["total"]),
                "proactive_time_accuracy": (100 * row["time_correct"] / row["total"], row["total"]),
            }
        else:
            expected = {"qa_accuracy": (100 * row["correct"] / row["total"], row["total"])}
            if task == "total":
                expected["accuracy"] = expected["qa_accuracy"]
        for name, (value, population) in expected.items():
            metric = family.get(name)
            got = None if metric is None else (metric.value, metric.population)
            if got != (pytest.approx(value), population):
                found.append(f"{task} {name}: {got} != {(value, population)}")
    for task, families in scores.by_task_type.items():  # count.py writes no row for them
        metric = families["streamingbench"].get("qa_accuracy")
        if task not in scored.oracle.rows and metric is not None and metric.value is not None:
            found.append(f"{task}: qa_accuracy {metric.value} where count.py has no row")
    excluded = scores.overall["streamingbench"].get("excluded_answers")
    got_excluded = None if excluded is None else excluded.value
    if scored.part != "proactive" and got_excluded != scored.oracle.excluded:
        found.append(f"excluded {got_excluded} != {scored.oracle.excluded}")
    return found


def assert_agreement(runs: list[Scored]) -> None:
    assert {scored.part for scored in runs} == set(PARTS)
    for scored in runs:
        assert disagreements(scored, scored.scores) == [], scored.exported


def assert_extended_disagrees(runs: list[Scored]) -> None:
    """`streamingbench-extended` on the same runs fails the comparison, on QA and on
    proactive output."""
    failing = set()
    for scored in runs:
        if disagreements(scored, score_exported(scored.exported, "streamingbench-extended")):
            failing.add(scored.part)
    assert failing == set(PARTS)


def test_streamingbench_agrees_with_count_py_on_every_part(fixture_runs: list[Scored]) -> None:
    assert_agreement(fixture_runs)


def test_streamingbench_extended_disagrees_with_count_py(fixture_runs: list[Scored]) -> None:
    assert_extended_disagrees(fixture_runs)


def test_the_public_sample_agrees_with_count_py_too(sample_runs: list[Scored]) -> None:
    assert_agreement(sample_runs)
    assert_extended_disagrees(sample_runs)


def test_the_runs_exercised_every_answer_form(fixture_runs: list[Scored]) -> None:
    said = {text for scored in fixture_runs if scored.part != "proactive" for text in scored.texts}
    forms = {"(", "Option ", "Answer: D", "**", "<think>", "assistant\n", "（", "：", "wait"}
    assert all(any(text and form in text for text in said) for form in forms)
    assert {"", None, "Silent.", "<silent>", "E"} <= said
    items = [item for scored in fixture_runs for item in scored.oracle.items.values()]
    qa = [item for item in items if "parsed" in item]
    proactive = [item for item in items if "hit" in item]
    # Right and wrong answers, excluded ones, hits, misses on time and off it.
    assert {(item["correct"], item["excluded"]) for item in qa} == {
        (True, False),
        (False, False),
        (False, True),
    }
    assert {(item["on_time"], item["hit"]) for item in proactive} == {
        (True, True),
        (True, False),
        (False, False),
    }
    excluded = [scored for scored in fixture_runs if scored.oracle.excluded]
    assert {scored.part for scored in excluded} >= {"sqa"}
    assert all(
        any("left out of the accuracy denominators" in note for note in scored.scores.notes)
        for scored in excluded
    )

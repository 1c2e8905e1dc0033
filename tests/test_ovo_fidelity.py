"""`ovo-offline` agrees with OVO-Bench's published scoring script on fresh runs of OVO records.

How this is checked. OVO-Bench's own `ovo_bench_new.json` format (the fixture
tests/fixtures/ovo_bench, and the public sample under ../shared/data where present, every
one of the twelve task types) is run end to end through the Core under the `ovo-offline`
protocol, on stand-in videos, against `ScriptedAdapter` (tests/wire_adapters.py). Its answers
cycle through the forms a model writes: bare letters, `(B)`, `Option B`, `Answer: D`, `**B**`,
think blocks, role lines, full-width letters, digits and punctuation, case and spacing
variants, empty texts, silence tokens (`WAIT` holds the letter A), declined questions, counts
in words and in digits, and yes/no in every case.
The exported event log is then scored twice: by the scorer under `ovo-offline`, and by
`ovo_oracle` below, written again from the rules of OVO-Bench's public
`utils/OVOBenchScore.py` (sharing no code with scorer/), reading the source JSON itself:
- a multiple-choice question is right when its gold letter `chr(65 + gt)` occurs in the raw
  response, case-sensitive; no response scores 0;
- a REC probe is right when the response's digit runs, joined, equal `str(count)`;
- an SSR/CRR probe is right when the response is exactly "N" (type 0) or "Y" (type 1), or
  contains "No" (type 0) or "Yes" (type 1), case-sensitive;
- a task's accuracy is the mean of its scores, one per question, the probes of all a forward
  task's records pooled; a category's is the mean of its tasks' accuracies; the total is the
  mean of the three categories.
The response OVO-Bench would have scored is the model's answer to that question: the last
response to its task id begun after it was asked, when that response completed. Per question
(response and score), per task, per category and the total must agree; each value to 1e-9
and exactly as OVO-Bench prints it (two decimals: the float sums run in another order).
Scoring the same runs under `ovo-extended` must disagree.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import QARecord, Record
from streameval.core.store.store import Store
from streameval.events import probe_task_id
from streameval.scorer.report import RunScores, score_exported
from tests.scripted_runs import scripted_run
from tests.test_data_cli import write_video
from tests.test_import_trace import FIXTURES, sample

FIXTURE = FIXTURES / "ovo_bench" / "ovo_bench_new.json"

# ----------------------------------------------------------------------------- the script
# Each form: (gold, a wrong value) -> the text said, or None (the question is declined).

CHOICE_FORMS = (
    lambda g, o: g,
    lambda g, o: f"({g})",
    lambda g, o: f"Option {g}",
    lambda g, o: f"Answer: {o}",  # holds A: right when A is the gold letter
    lambda g, o: f"**{g}**",
    lambda g, o: f"<think>{o} or {g}?</think> {o}",
    lambda g, o: f"assistant\n{g}",
    lambda g, o: f"（{g}）。",
    lambda g, o: chr(ord(g) + 0xFEE0),  # the full-width letter: no ASCII letter in it
    lambda g, o: g.lower(),
    lambda g, o: f"  {g} ",
    lambda g, o: "",
    lambda g, o: "WAIT",
    lambda g, o: "wait",
    lambda g, o: "<silent>",
    lambda g, o: None,
    lambda g, o: f"option {o.lower()}",
    lambda g, o: f"The answer is {o}.",
    lambda g, o: "I cannot tell.",
)
COUNT_FORMS = (
    lambda c, w: c,
    lambda c, w: f"{c} times",
    lambda c, w: f"It was done {c} times, not {w}.",  # digits joined: c then w
    lambda c, w: f"<think>{w}?</think>{c}",
    lambda c, w: c.translate(str.maketrans("0123456789", "０１２３４５６７８９")),
    lambda c, w: f"**{c}**",
    lambda c, w: f"Answer: {c}.",
    lambda c, w: f"{c}.0",
    lambda c, w: "three",
    lambda c, w: "",
    lambda c, w: "WAIT",
    lambda c, w: None,
    lambda c, w: w,
    lambda c, w: f"assistant\n{c}",
)
YES_NO_FORMS = (
    lambda g, w: g,
    lambda g, w: g[0],  # "Y" / "N"
    lambda g, w: w[0],
    lambda g, w: g.lower(),
    lambda g, w: g.upper(),
    lambda g, w: f"**{g}**",
    lambda g, w: f"<think>{w}</think> {g}",
    lambda g, w: f"{w}, {g.lower()}",
    lambda g, w: "Not yet",  # holds "No"
    lambda g, w: f" {g[0]}",
    lambda g, w: f"{g}。",
    lambda g, w: "Ｙｅｓ",
    lambda g, w: "",
    lambda g, w: "WAIT",
    lambda g, w: None,
    lambda g, w: f"assistant\n{g}",
)


FORMS = {"choice": CHOICE_FORMS, "count": COUNT_FORMS, "yes_no": YES_NO_FORMS}


def form_of(kind: str, gold: str, options: int) -> tuple[str, str]:
    """(gold, a wrong value) for a form of this kind."""
    if kind == "choice":
        return gold, chr(65 + (ord(gold) - 64) % options)
    if kind == "yes_no":
        return gold, "No" if gold == "Yes" else "Yes"
    return gold, str(int(gold) + 1)


def script(records: list[Record], round_: int) -> tuple[dict[str, dict], set[tuple[str, int]]]:
    """(what to say to every question and probe, the forms used): each kind's forms taken in
    turn, from a start that moves on each round."""
    entries: dict[str, dict] = {}
    turns = dict.fromkeys(FORMS, 7 * round_)
    used: set[tuple[str, int]] = set()

    def say(task_id: str, kind: str, gold: str, options: int = 0) -> None:
        index = turns[kind] % len(FORMS[kind])
        turns[kind] += 1
        used.add((kind, index))
        entries[task_id] = {"answer": FORMS[kind][index](*form_of(kind, gold, options))}

    for record in records:
        if isinstance(record, QARecord):
            say(record.record_id, "choice", record.answer, len(record.options))
            continue
        for index, probe in enumerate(record.probes):
            kind = "yes_no" if probe.answer in ("Yes", "No") else "count"
            say(probe_task_id(record.record_id, index), kind, probe.answer)
    return entries, used


# ----------------------------------------------------------------------------- the oracle
# OVO-Bench's rules, written out again from its public utils/OVOBenchScore.py.

CATEGORY = {
    **dict.fromkeys(("EPM", "ASI", "HLD"), "backward"),
    **dict.fromkeys(("OCR", "ACR", "ATR", "STU", "FPD", "OJR"), "realtime"),
    **dict.fromkeys(("REC", "SSR", "CRR"), "forward"),
}


@dataclass
class Asked:
    task_id: str
    t: float
    ns: int


def responses(lines: list[dict]) -> tuple[dict[str, list[Asked]], dict[str, str | None]]:
    """(per session, the questions asked in order; per task id, the text of the last
    response begun after it was asked, None when there is none or it never completed)."""
    asked: dict[str, list[Asked]] = defaultdict(list)
    begun: dict[str, tuple[str, int]] = {}  # response id -> (task id, onset ns)
    texts: dict[str, str] = {}  # response id -> final text
    for line in lines:
        if line["type"] != "event":
            continue
        kind, payload, ns = line["kind"], line["payload"], line["runtime_ns"]
        if kind == "question_sent":
            asked[line["session_id"]].append(Asked(payload["task_id"], payload["t"], ns))
        elif kind == "response_start":
            begun[payload["response_id"]] = (payload["task_id"], ns)
        elif kind == "response_final":
            texts[payload["response_id"]] = payload["text"]
    answer: dict[str, str | None] = {}
    for questions in asked.values():
        for question in questions:
            after = [r for r, (task, ns) in begun.items() if task == question.task_id]
            after = [r for r in after if begun[r][1] >= question.ns]
            last = max(after, key=lambda r: begun[r][1]) if after else None
            answer[question.task_id] = texts.get(last) if last is not None else None
    return asked, answer


def choice_score(response: str | None, gt: int) -> int:
    return 0 if response is None else int(chr(65 + gt) in response)


def count_score(response: str | None, count: int) -> int:
    return 0 if response is None else int("".join(re.findall(r"\d+", response)) == str(count))


def yes_no_score(response: str | None, kind: int) -> int:
    if (response == "N" and kind == 0) or (response == "Y" and kind == 1):
        return 1
    return 0 if response is None else int(("No" if kind == 0 else "Yes") in response)


@dataclass
class Oracle:
    items: dict[str, tuple[str | None, int]]  # task id -> (response, score)
    tasks: dict[str, list[int]]  # task type -> its scores, one per question
    categories: dict[str, float]  # in percent
    total: float


def ovo_oracle(entries: list[dict], lines: list[dict]) -> Oracle:
    asked, answer = responses(lines)
    items: dict[str, tuple[str | None, int]] = {}
    tasks: dict[str, list[int]] = defaultdict(list)
    for entry in entries:
        questions = asked[f"ovo_bench:{entry['id']}"]
        if "test_info" not in entry:
            (question,) = questions
            response = answer[question.task_id]
            items[question.task_id] = (response, choice_score(response, entry["gt"]))
            tasks[entry["task"]].append(items[question.task_id][1])
            continue
        # OVO-Bench asks each probe at its own time: the probes in time order are the
        # questions the session was asked, in order.
        probes = sorted(entry["test_info"], key=lambda probe: probe["realtime"])
        assert [q.t for q in questions] == [probe["realtime"] for probe in probes]
        for question, probe in zip(questions, probes, strict=True):
            response = answer[question.task_id]
            if entry["task"] == "REC":
                score = count_score(response, probe["count"])
            else:
                score = yes_no_score(response, probe["type"])
            items[question.task_id] = (response, score)
            tasks[entry["task"]].append(score)
    by_category: dict[str, list[float]] = defaultdict(list)
    for task, scores in tasks.items():
        by_category[CATEGORY[task]].append(sum(scores) / len(scores))
    assert set(by_category) == {"backward", "realtime", "forward"}  # else OVO-Bench fails
    categories = {name: 100 * sum(accs) / len(accs) for name, accs in by_category.items()}
    total = sum(categories.values()) / 3
    return Oracle(items, dict(tasks), categories, total)


# ----------------------------------------------------------------------------- the runs


@dataclass
class Round:
    exported: Path
    oracle: Oracle
    answers: dict[str, str | None]  # what the adapter was told to say, per task id
    forms: set[tuple[str, int]]  # the answer forms it used


def stand_ins(records: list[Record], root: Path) -> None:
    """One 1-fps stand-in per video, a second past the latest question or probe on it."""
    latest: dict[str, float] = defaultdict(float)
    for record in records:
        if isinstance(record, QARecord):
            times = [record.question_time_s]
        else:
            times = [probe.t for probe in record.probes]
        latest[record.video_path] = max(latest[record.video_path], *times)
    for video, t in latest.items():
        write_video(root / video, int(t) + 2, fps=1)


def run_rounds(source: Path, root: Path, rounds: int) -> list[Round]:
    videos = root / "ovo"
    videos.mkdir()
    path = videos / "ovo_bench_new.json"
    path.write_text(source.read_text())
    entries = json.loads(source.read_text())
    records = list(load_benchmark(str(path), root / "cache").records)
    stand_ins(records, videos)
    done = []
    with Store(f"sqlite:///{root / 'store.db'}") as store:
        for round_ in range(rounds):
            entries_said, forms = script(records, round_)
            exported, lines = scripted_run(
                store,
                root,
                f"round{round_}",
                entries_said,
                benchmark=str(path),
                cache_dir=str(root / "cache"),
                profile="ovo-offline",
            )
            said = {task: entry["answer"] for task, entry in entries_said.items()}
            done.append(Round(exported, ovo_oracle(entries, lines), said, forms))
    return done


def published(value: float) -> str:
    """As OVO-Bench prints it."""
    return f"{value:.2f}"


def assert_agreement(scores: RunScores, oracle: Oracle) -> None:
    items = {
        answer["task_id"]: (answer["response"], int(answer["correct"]))
        for record in scores.records
        if record.ovo is not None
        for answer in record.ovo["answers"]
    }
    assert items == oracle.items
    for task, task_scores in oracle.tasks.items():
        metric = scores.by_task_type[task]["ovo"][CATEGORY[task]]
        expected = 100 * sum(task_scores) / len(task_scores)
        assert metric.value == pytest.approx(expected, abs=1e-9), task
        assert published(metric.value) == published(expected), task
        assert metric.population == len(task_scores), task
    ovo = scores.overall["ovo"]
    for name, expected in [*oracle.categories.items(), ("total", oracle.total)]:
        assert ovo[name].value == pytest.approx(expected, abs=1e-9), name
        assert published(ovo[name].value) == published(expected), name


@pytest.fixture(scope="module")
def fixture_rounds(tmp_path_factory: pytest.TempPathFactory) -> list[Round]:
    return run_rounds(FIXTURE, tmp_path_factory.mktemp("ovo-fidelity"), rounds=2)


def test_every_question_task_and_category_agrees_with_ovo_benchs_script(
    fixture_rounds: list[Round],
) -> None:
    for round_ in fixture_rounds:
        assert_agreement(score_exported(round_.exported, "ovo-offline"), round_.oracle)


def test_the_real_sample_agrees_with_ovo_benchs_script_too(tmp_path: Path) -> None:
    """Where ../shared/data is present: the public sample, every task type."""
    source = sample("ovo_bench", "ovo_bench_sample.json")
    (round_,) = run_rounds(source, tmp_path, rounds=1)
    assert set(round_.oracle.tasks) == set(CATEGORY)
    assert_agreement(score_exported(round_.exported, "ovo-offline"), round_.oracle)


def test_our_readings_disagree_with_ovo_benchs_script(fixture_rounds: list[Round]) -> None:
    for round_ in fixture_rounds:
        extended = score_exported(round_.exported, "ovo-extended")
        with pytest.raises(AssertionError):
            assert_agreement(extended, round_.oracle)
        # Past the silence tokens, the forward tasks' denominators differ too: a record's
        # mean is not its probes pooled with the other records'.
        pooled = [
            100 * sum(scores) / len(scores)
            for task, scores in round_.oracle.tasks.items()
            if CATEGORY[task] == "forward"
        ]
        ours = [
            extended.by_task_type[task]["ovo"]["forward"].value
            for task in round_.oracle.tasks
            if CATEGORY[task] == "forward"
        ]
        assert ours != pytest.approx(pooled)


def test_the_runs_exercised_every_form_and_rule(fixture_rounds: list[Round]) -> None:
    used = set().union(*(round_.forms for round_ in fixture_rounds))
    assert used == {(kind, index) for kind, forms in FORMS.items() for index in range(len(forms))}
    # Every question and probe was asked and has its scripted answer, or none when declined.
    for round_ in fixture_rounds:
        responses = {task: response for task, (response, _) in round_.oracle.items.items()}
        assert responses == round_.answers
    items = [item for round_ in fixture_rounds for item in round_.oracle.items.values()]
    # Silence counts as text: "WAIT" is right where A is the gold letter, wrong elsewhere.
    assert {score for response, score in items if response == "WAIT"} == {0, 1}
    assert any(score == 0 and response == "" for response, score in items)
    assert any(score == 0 and response is None for response, score in items)

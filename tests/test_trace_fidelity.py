"""`trace-paper-v1` agrees with TRACE's public scoring rules on a fresh run of TRACE records.

How this is checked. The TRACE release fixture (tests/fixtures/trace_release) is run end to
end through the Core, on stand-in videos, against `ScriptedAdapter` (tests/wire_adapters.py),
whose every answer is a text whose TRACE reading is known:
- QA: the golden answer texts of tests/test_scorer_parsing.py, whose labels under TRACE's
  paper parser were observed from TRACE's own scorer, then ADVERSARIAL texts, one or more for
  each of the five rules where this project once read TRACE otherwise (issue 31), labelled
  by hand from TRACE's scoring.py; four rounds give every record another text, so all texts
  are answered; past them, every third question is declined.
- Proactive: per window, in turn, the trigger's answer in other case and spacing (or after a
  think block), an accepted fact (TRACE ignores them), "Silent." and "<silent>" (answers to
  TRACE), "wait" (its only silence token), two answers in one window, an early answer, the
  answer after a think block and a role line, before a role word that ends the text, after a
  full-width colon, and noise between windows (false alarms), some of it silence or an answer
  only by those three rules ("：wait", "\nassistant", "<think>x</think>\n\nassistant\nwait").
The exported event log is then scored twice: by the scorer under `trace-paper-v1`, and by
`trace_oracle` below, a second implementation written straight from TRACE's rules (the
issue's list and TRACE's scoring.py), sharing no code with scorer/. Every QA and proactive
metric (value, population, observed count) must agree, and the run must have exercised every
rule. Scored under `trace-extended` instead, the same export disagrees with the oracle.
Where ../shared/data is present, the real TRACE sample is run the same way as an extra check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import ProactiveRecord, QARecord, Record
from streameval.core.store.store import Store
from streameval.scorer.report import RunScores, score_exported
from tests.scripted_runs import scripted_run
from tests.test_data_cli import stand_in_videos
from tests.test_import_trace import FIXTURES, sample
from tests.test_scorer_parsing import GOLDEN

TOLERANCE_S = 5.0
ROUNDS = 4  # QA answer rounds: 4 x 18 fixture records cover the 57 texts

# TRACE's five rules on texts where this project once read otherwise, with TRACE's paper
# label (the same for labels A-D and A-F), worked out by hand from TRACE's scoring.py.
ADVERSARIAL = {
    "A\nassistant:\nB or C": None,  # a role word with a colon is no role line: B or C
    "(C)\nuser": "C",  # a role word ending the text is no role line; leading (C)
    "\uff1aB": "B",  # a leading full-width colon goes
    "<think>x</think>\nassistant\nB": None,  # "assistant b": answered, no label
    "B: option x is wrong, the answer is b": None,  # the first introducer names no label
    "Answer: B, which is red and a ball": None,  # "and a" after the introduced label
    "B. Answer: B and X": "B",  # voided introducer, then the leading label
}
TEXTS = [text for text, _strict, _paper in GOLDEN] + list(ADVERSARIAL)


# ----------------------------------------------------------------------------- the script


def qa_text(record: QARecord, position: int) -> str | None:
    """The text at this position; past the 57 texts, every third question is declined."""
    if position >= len(TEXTS) and position % 3 == 0:
        return None
    text = TEXTS[position % len(TEXTS)]
    return "B" if text == "E" and "E" in _labels(record) else text


# Said after a window by case: silence or an answer only by TRACE's normalisation rules.
NOISE = {8: "<think>x</think>\n\nassistant\nwait", 9: "\nassistant", 10: "\uff1await"}
CASES = 11


def proactive_steps(record: ProactiveRecord, offset: int) -> list[tuple[float, str]]:
    """What to say around each trigger, cycling through TRACE's cases from `offset`."""
    steps: list[tuple[float, str]] = []
    for index, trigger in enumerate(record.triggers):
        start, answer = trigger.start_s, trigger.answer
        case = (index + offset) % CASES
        if case == 0:
            steps.append((start, f"  {answer.upper()}  "))
        elif case == 1:
            fact = trigger.accepted_facts[0] if trigger.accepted_facts else "a wrong answer"
            steps.append((start, fact))
        elif case == 2:
            steps.append((start, "Silent."))
        elif case == 3:
            steps.append((start, "wait"))
        elif case == 4:
            steps += [(start, "<silent>"), (start, answer)]
        elif case == 5:
            steps.append((max(0.0, start - 3.0), answer))
        elif case == 6:
            steps.append((start, f"<think>is it {answer}?</think> {answer}"))
        elif case == 8:  # "assistant <answer>" to TRACE: answered, and no exact match
            steps.append((start, f"<think>is it {answer}?</think>\nassistant\n{answer}"))
        elif case == 9:  # "<answer> assistant" to TRACE
            steps.append((start, f"{answer}\nassistant"))
        elif case == 10:  # the answer itself to TRACE
            steps.append((start, f"\uff1a {answer}"))
        if case % 2 == 0 or case in NOISE:  # after the window, often before the next one
            steps.append((start + TOLERANCE_S + 1.0, NOISE.get(case, "noise")))
    return sorted(steps)


def script(records: list[Record], round_: int) -> dict:
    """QA records come first, so a round's QA positions follow the previous round's."""
    questions = sum(isinstance(record, QARecord) for record in records)
    entries = {}
    for position, record in enumerate(records):
        if isinstance(record, QARecord):
            entries[record.record_id] = {"answer": qa_text(record, position + questions * round_)}
        else:
            entries[record.record_id] = {"steps": proactive_steps(record, position)}
    return entries


# ----------------------------------------------------------------------------- the oracle
# TRACE's rules, written out again from the issue and TRACE's scoring.py, for the texts the
# script uses (ASCII apart from the full-width colon), scanning by hand where scorer/ uses
# regular expressions.


def _labels(record: QARecord) -> tuple[str, ...]:
    return tuple(chr(ord("A") + i) for i in range(len(record.options)))


PAPER_LABEL = {text: paper for text, _strict, paper in GOLDEN} | ADVERSARIAL
# TRACE's strict parse (`trace-strict`): the whole normalised text is one bracketed or bare
# label; of the adversarial texts only the full-width colon's leaves one ("b").
STRICT_LABEL = (
    {text: strict for text, strict, _paper in GOLDEN}
    | dict.fromkeys(ADVERSARIAL)
    | {"\uff1aB": "B"}
)
ROLES = ("user", "assistant", "system")


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _drop_think_blocks(text: str) -> str:
    """Each <think>...</think> (any case) goes with the whitespace after it."""
    kept, at, lower = [], 0, text.lower()
    while (start := lower.find("<think>", at)) >= 0 and (end := lower.find("</think>", start)) >= 0:
        kept.append(text[at:start])
        at = _skip_space(text, end + len("</think>"))
    return "".join(kept) + text[at:]


def _cut_at_role_line(text: str) -> str:
    """Cut before the first newline that whitespace, a role word alone and whitespace holding
    a newline follow."""
    for newline in (i for i, char in enumerate(text) if char == "\n"):
        word = _skip_space(text, newline + 1)
        for role in ROLES:
            after = word + len(role)
            if text[word:after].lower() == role and "\n" in text[after : _skip_space(text, after)]:
                return text[:newline]
    return text


def trace_normalise(text: str) -> str:
    text = _drop_think_blocks(text).replace("<think>", "").replace("</think>", "")
    text = _cut_at_role_line(text).lstrip()
    if text[:1] in (":", "\uff1a"):
        text = text[1:]
    return " ".join(text.lower().split())


def is_answer(text: str) -> bool:
    return trace_normalise(text) not in ("", "wait")


@dataclass
class Episode:
    onset_ns: int
    onset_t: float
    text: str = ""
    final_ns: int | None = None


@dataclass
class Session:
    frames: list[tuple[float, int]] = field(default_factory=list)  # (t, sent ns)
    task_ns: int | None = None
    silent_ns: list[int] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    finished: bool = False


def read_sessions(lines: list[dict]) -> dict[str, Session]:
    sessions: dict[str, Session] = {}
    for line in lines:
        if line["type"] != "event":
            continue
        session = sessions.setdefault(line["session_id"], Session())
        kind, ns, payload = line["kind"], line["runtime_ns"], line["payload"]
        if kind == "frame_sent":
            session.frames.append((payload["t"], ns))
        elif kind in ("question_sent", "instruction_sent"):
            session.task_ns = ns
        elif kind == "silent":
            session.silent_ns.append(ns)
        elif kind == "response_start":
            session.episodes.append(Episode(ns, line["video_t"]))
        elif kind == "response_delta":
            session.episodes[-1].text += payload["text"]
        elif kind == "response_final":
            session.episodes[-1].text = payload["text"]
            session.episodes[-1].final_ns = ns
        elif kind == "session_finished":
            session.finished = True
    return sessions


def qa_oracle(
    records: list[QARecord],
    sessions: dict[str, Session],
    labels: dict[str, str | None],
    table: dict[str, str | None] = PAPER_LABEL,
) -> dict[str, tuple]:
    correct = invalid = finished = 0
    ttft, latency, timed = [], [], 0
    for record in records:
        session = sessions[record.record_id]
        finished += session.finished
        after = [e for e in session.episodes if e.onset_ns >= session.task_ns]
        prediction = after[-1] if after and after[-1].final_ns is not None else None
        label = None
        if prediction is not None and is_answer(prediction.text):
            label = table[prediction.text]
        labels[record.record_id] = label
        correct += label == record.answer
        invalid += label is None
        if after or any(ns >= session.task_ns for ns in session.silent_ns):
            timed += 1
        if after:
            ttft.append((after[0].onset_ns - session.task_ns) / 1e9)
            latency.append((prediction.final_ns - session.task_ns) / 1e9)
    n = len(records)
    metrics = {
        "accuracy": (correct / n, n, n),
        "completion_rate": (finished / n, n, n),
        "invalid_output_rate": (invalid / n, n, n),
    }
    for name, values in (("ttft_s", ttft), ("latency_s", latency)):
        for suffix, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0)):
            metrics[f"{name}_{suffix}"] = (float(np.quantile(values, q)), timed, len(values))
    return metrics


def trace_windows(record: ProactiveRecord) -> list[tuple[float, float, str, float]]:
    """(start, end, answer, end of the eventual view: the next later start, else the end)."""
    starts = sorted({trigger.start_s for trigger in record.triggers})
    windows = []
    for index, trigger in enumerate(record.triggers):
        later = [s for s in starts if s > trigger.start_s]
        if trigger.is_state:
            end = eventual = trigger.interval_end_s
        else:
            end = min([trigger.start_s + TOLERANCE_S, *later[:1]])
            eventual = later[0] if later else end
        windows.append((trigger.start_s, end, index, trigger.answer, eventual))
    return [(s, e, a, v) for s, e, _i, a, v in sorted(windows)]


@dataclass
class ProactiveTally:
    windows: int = 0
    score: float = 0.0
    eventual_score: float = 0.0
    in_window: int = 0
    before: int = 0
    answered: int = 0
    false_alarms: int = 0
    redundant: int = 0
    finished: int = 0
    delays: list[float] = field(default_factory=list)


def proactive_oracle(
    records: list[ProactiveRecord], sessions: dict[str, Session], tally: ProactiveTally
) -> None:
    for record in records:
        session = sessions[record.record_id]
        tally.finished += session.finished
        windows = trace_windows(record)
        answered = [e for e in session.episodes if e.final_ns is not None and is_answer(e.text)]
        answered.sort(key=lambda e: e.onset_t)
        used: set[int] = set()
        tally.windows += len(windows)
        tally.answered += len(answered)
        for start, end, answer, _eventual in windows:
            inside = [i for i, e in enumerate(answered) if start <= e.onset_t < end]
            tally.redundant += max(0, len(inside) - 1)
            free = [i for i in inside if i not in used]
            if free:
                episode = answered[free[0]]
                used.add(free[0])
                tally.in_window += 1
                tally.score += trace_normalise(episode.text) == trace_normalise(answer)
                sent = [ns for t, ns in session.frames if t >= start]
                if sent and episode.onset_ns >= sent[0]:
                    tally.delays.append((episode.onset_ns - sent[0]) / 1e9)
                continue
            earlier = [i for i, e in enumerate(answered) if i not in used and e.onset_t < start]
            if earlier:
                used.add(earlier[-1])
                tally.before += 1
        for episode in answered:
            outside = not any(s <= episode.onset_t < e for s, e, _a, _v in windows)
            tally.false_alarms += outside and any(s > episode.onset_t for s, _e, _a, _v in windows)
        # The eventual view: its own assignment, from each start to the eventual end.
        taken: set[int] = set()
        for start, _end, answer, eventual in windows:
            free = [
                i
                for i, e in enumerate(answered)
                if i not in taken and start <= e.onset_t < eventual
            ]
            if free:
                taken.add(free[0])
                tally.eventual_score += trace_normalise(answered[free[0]].text) == (
                    trace_normalise(answer)
                )


def proactive_metrics(tally: ProactiveTally, records: int) -> dict[str, tuple]:
    w = tally.windows
    return {
        "in_window_accuracy": (tally.score / w, w, w),
        "eventual_accuracy": (tally.eventual_score / w, w, w),
        "miss_rate": ((w - tally.in_window) / w, w, w),
        "before_window_rate": (tally.before / w, w, w),
        "false_alarm_rate": (tally.false_alarms / tally.answered, tally.answered, tally.answered),
        "median_response_delay_runtime_s": (
            float(np.median(tally.delays)),
            tally.in_window,
            len(tally.delays),
        ),
        "redundant_responses": (float(tally.redundant), w, w),
        "completion_rate": (tally.finished / records, records, records),
    }


# ----------------------------------------------------------------------------- the runs


@dataclass
class Round:
    scores: RunScores
    oracle: dict[str, dict[str, tuple]]
    labels: dict[str, str | None]  # the oracle's parsed label per QA record
    sessions: dict[str, Session]
    exported: Path
    strict: Round | None = None  # the same export under `trace-strict`, with its oracle


def run_rounds(release: Path, root: Path) -> list[Round]:
    """The release's records run ROUNDS times (proactive in the first round only), each
    export scored by the scorer and by the oracle."""
    path = root / "trace"
    path.mkdir()
    for name in ("qa.jsonl", "proactive.jsonl"):
        (path / name).write_text((release / name).read_text())
    benchmark = load_benchmark(str(path), root / "cache")
    stand_in_videos(benchmark, path)
    records = list(benchmark.records)
    qa = [r for r in records if isinstance(r, QARecord)]
    proactive = [r for r in records if isinstance(r, ProactiveRecord)]
    assert ROUNDS * len(qa) > len(TEXTS)  # every text is answered
    done = []
    with Store(f"sqlite:///{root / 'store.db'}") as store:
        for round_ in range(ROUNDS):
            exported, lines = scripted_run(
                store,
                root,
                f"round{round_}",
                script(records, round_),
                benchmark=str(path),
                cache_dir=str(root / "cache"),
                tasks=["qa", "proactive"] if round_ == 0 else ["qa"],
            )
            sessions = read_sessions(lines)
            labels: dict[str, str | None] = {}
            oracle = {"qa": qa_oracle(qa, sessions, labels)}
            if round_ == 0:
                tally = ProactiveTally()
                proactive_oracle(proactive, sessions, tally)
                oracle["proactive"] = proactive_metrics(tally, len(proactive))
            scores = score_exported(exported, "trace-paper-v1")
            strict_labels: dict[str, str | None] = {}
            strict_oracle = {**oracle, "qa": qa_oracle(qa, sessions, strict_labels, STRICT_LABEL)}
            strict = Round(
                score_exported(exported, "trace-strict"),
                strict_oracle,
                strict_labels,
                sessions,
                exported,
            )
            done.append(Round(scores, oracle, labels, sessions, exported, strict))
    return done


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory) -> list[Round]:
    return run_rounds(FIXTURES / "trace_release", tmp_path_factory.mktemp("trace-fidelity"))


def assert_agreement(rounds: list[Round]) -> None:
    for number, round_ in enumerate(rounds):
        parsed = {r.record_id: r.qa["parsed"] for r in round_.scores.records if r.qa}
        assert parsed == round_.labels, number
        for family, expected in round_.oracle.items():
            scored = round_.scores.overall[family]
            assert set(scored) == set(expected), (number, family)
            for name, (value, population, observed) in expected.items():
                metric = scored[name]
                got = (metric.value, metric.population, metric.observed)
                assert got == (pytest.approx(value), population, observed), (number, name)


def test_every_qa_and_proactive_metric_agrees_with_traces_rules(rounds: list[Round]) -> None:
    assert_agreement(rounds)


def test_trace_strict_agrees_with_traces_strict_parse(rounds: list[Round]) -> None:
    """`trace-strict`: the same runs, TRACE's strict parse; it reads fewer labels than the
    recoverable parse, so the two oracles differ and each profile meets its own."""
    assert_agreement([r.strict for r in rounds])
    assert any(r.strict.labels != r.labels for r in rounds)


def test_the_real_sample_agrees_with_traces_rules_too(tmp_path: Path) -> None:
    """An extra check where ../shared/data is present: the public sample's own records."""
    rounds = run_rounds(sample("trace_release"), tmp_path)
    assert_agreement(rounds)
    assert_agreement([r.strict for r in rounds])


def test_the_run_exercised_every_rule(rounds: list[Round]) -> None:
    answered = {text for round_ in rounds for s in round_.sessions.values() for text in
                (e.text for e in s.episodes)}  # fmt: skip
    assert set(TEXTS) - {"E", ""} <= answered
    first = rounds[0].scores
    records = {record.record_id: record for record in first.records}
    assignments = [
        window["assignment"]
        for record in records.values()
        if record.proactive is not None
        for window in record.proactive["windows"]
    ]
    assert {"in_window", "before_window", "no_output"} <= set(assignments)
    proactive = first.overall["proactive"]
    assert 0 < proactive["false_alarm_rate"].value < 1
    assert proactive["redundant_responses"].value > 0
    # An accepted fact said in its window scores 0 under TRACE's exact match.
    facts = [
        window
        for record in records.values()
        if record.proactive is not None
        for window in record.proactive["windows"]
        if window["assignment"] == "in_window" and window["prediction"] != window["answer"]
        and window["score"] == 0.0 and not window["prediction"].startswith(("Silent", "<", "noise"))
    ]  # fmt: skip
    assert facts
    # "Silent." is an answer to TRACE; "wait" is not.
    said = [
        w["prediction"] for r in records.values() if r.proactive for w in r.proactive["windows"]
    ]
    assert "Silent." in said and "wait" not in said
    # A delay is on the runtime clock (processing time here), a few milliseconds at most.
    delay = proactive["median_response_delay_runtime_s"].value
    assert 0 < delay < 1 and not math.isnan(delay)

    # TRACE's normalisation rules decided these windows: "assistant <answer>" and "<answer>
    # assistant" are answers that miss the exact match, "：<answer>" is the answer itself.
    scored = {
        w["prediction"]: w["score"]
        for r in records.values()
        if r.proactive
        for w in r.proactive["windows"]
        if w["assignment"] == "in_window"
    }
    assert any("\nassistant\n" in text and score == 0.0 for text, score in scored.items())
    assert any(text.endswith("\nassistant") and score == 0.0 for text, score in scored.items())
    assert any(text.startswith("\uff1a") and score == 1.0 for text, score in scored.items())
    said_after = {e.text for s in rounds[0].sessions.values() for e in s.episodes}
    assert set(NOISE.values()) <= said_after


def test_trace_extended_disagrees_on_the_five_rules(rounds: list[Round]) -> None:
    """The same exports under this project's readings: the adversarial QA texts parse
    otherwise, and proactive answers, false alarms and in-window scores move."""
    extended = [
        Round(
            score_exported(r.exported, "trace-extended"), r.oracle, r.labels, r.sessions, r.exported
        )
        for r in rounds
    ]
    with pytest.raises(AssertionError):
        assert_agreement(extended)
    differs = set()
    for round_, other in zip(rounds, extended, strict=True):
        by_id = {r.record_id: r.qa["parsed"] for r in other.scores.records if r.qa}
        for record_id, label in round_.labels.items():
            session = round_.sessions[record_id]
            text = session.episodes[-1].text if session.episodes else None
            if text in ADVERSARIAL and by_id[record_id] != label:
                differs.add(text)
    # Rules 1, 2, 3 and 5 (and the first-introducer rule on a text opened by a label).
    assert differs == set(ADVERSARIAL) - {"(C)\nuser", "B. Answer: B and X"}
    trace, ours = rounds[0].scores.overall["proactive"], extended[0].scores.overall["proactive"]
    for name in ("false_alarm_rate", "in_window_accuracy"):
        assert ours[name].value != pytest.approx(trace[name].value), name
    assert ours["false_alarm_rate"].population != trace["false_alarm_rate"].population

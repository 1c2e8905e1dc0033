"""`trace-paper-v1` judges as TRACE's public scorer does, against a stand-in judge.

The stand-in is a real HTTP server (a thread on port 0) speaking the OpenAI chat completions
API; it logs every request body byte for byte and answers in the reply form named by the
`formN` token of the answer it is shown: clean numbers, numbers in prose, fenced, bold, after
a think block, malformed replies, HTTP 429 and 500, a timeout, a body that is not JSON.

The run is stored as the Core stores one (scorer/eventlog.py): SSR, CRR, a lower-case "ssr"
and a REC record, answers in and between windows, twice in one window, and answers equal
only after normalisation. The expected requests and window scores come from an oracle written
here from TRACE's rules (om-ai-lab/trace-bench, src/trace_bench/scoring.py): its prompt,
its body, its normalisation, its verdict sharing, its reply reading (`TRACE` column below, read
off its `_parse_judge_score`) and its eventual view. The `-extended` profile keeps this
project's judge and must disagree.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from streameval.core.benchmark.loader import load_benchmark
from streameval.core.benchmark.records import ProactiveRecord, Trigger
from streameval.core.store.store import Store
from streameval.scorer.eventlog import SessionLog, store_run
from streameval.scorer.judging.judges import LLMJudge, LLMJudgeConfig
from streameval.scorer.report import RunScores, score_run
from tests.test_cli import streameval
from tests.test_import_trace import FIXTURES, sample

MODEL = "Qwen3.5-35B-A3B"
TIMEOUT_S = 1.0  # the judge's; the stand-in's slow reply takes three times as long

# Reply forms: (reply, TRACE's score, this project's score); None = the judge fails (0).
# A reply of int is an HTTP status; "TIMEOUT" stalls; "NOT-JSON" is a body that is no JSON.
FORMS: list[tuple[str | int, float | None, float | None]] = [
    ("1", 1.0, 1.0),
    ("0", 0.0, 0.0),
    ("0.5", 0.5, 0.5),
    ("The prediction is correct. 1", 1.0, None),
    ("```\n0.8\n```", 0.8, None),
    ("**1**", 1.0, None),
    ("<think>The steps match.</think>\n1", 1.0, None),
    ("0.9 - mostly correct", 0.9, None),
    ("0.75.", None, 0.75),
    ("Score: 0.7.", None, 0.7),
    ("Score: 0.7", 0.7, 0.7),
    ("1.5", None, None),
    ("yes", None, None),
    ('{"score": 0.8}', 0.8, 0.8),
    (429, None, None),
    (500, None, None),
    ("TIMEOUT", None, None),
    ("NOT-JSON", None, None),
    ("<think>maybe 0.3</think> 1", 0.3, None),  # TRACE reads the first lone number
    ("`1`", 1.0, None),
    ("0.85/1", 0.85, None),
    ("", None, None),
    ("1.0", 1.0, 1.0),
]
_FORM = re.compile(r"form(\d+)", re.IGNORECASE)


# ----------------------------------------------------------------------------- the stand-in


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # every judge call in flight is accepted, none refused


class StandInJudge:
    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with owner._lock:
                    owner.bodies.append(body)
                    owner.paths.append(self.path)
                owner.answer(self, body)

            def log_message(self, *args) -> None:
                pass

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        content = json.loads(body)["messages"][-1]["content"]
        reply = FORMS[int(_FORM.findall(content)[-1])][0]
        if reply == "TIMEOUT":
            time.sleep(3 * TIMEOUT_S)
            reply = "1"
        if isinstance(reply, int):
            self._send(handler, reply, b'{"error": "busy"}')
        elif reply == "NOT-JSON":
            self._send(handler, 200, b"<html>gateway</html>")
        else:
            message = {"role": "assistant", "content": reply}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            self._send(handler, 200, json.dumps({"choices": [choice]}).encode())

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:
            pass  # the client gave up (the timeout form)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def stand_in() -> Iterator[StandInJudge]:
    server = StandInJudge()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def _own_verdict_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("STREAMEVAL_CACHE_DIR", str(tmp_path / "cache"))


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class Script:
    record: ProactiveRecord
    said: dict[int, str]  # second -> answer said then


def proactive(record_id: str, task_type: str, answers: list[str]) -> ProactiveRecord:
    """Triggers at 5, 15, 25, ...: windows [t, t + 5), eventual views [t, t + 10)."""
    return ProactiveRecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="handwritten",
        task_type=task_type,
        video_path=f"{record_id}.mp4",
        instruction=f"Tell me each new step ({record_id}).",
        instruction_time_s=0.0,
        triggers=tuple(
            Trigger(
                trigger_type="event_onset",
                answer=answer,
                point_s=5.0 + 10 * n,
                accepted_facts=(f"fact {n}",),
            )
            for n, answer in enumerate(answers)
        ),
    )


def scripts() -> list[Script]:
    """Every reply form once, in and between windows, plus shared and exact cases."""
    forms = list(range(len(FORMS)))
    ssr_answers = [f"Step {n}" for n in range(12)]
    # Form n said 1 s into window n; forms past the SSR record go to the CRR one.
    ssr = {5 + 10 * n + 1: f"<think>seen</think>  Form{n}: STEP {n}" for n in forms[:10]}
    ssr[5 + 10 * 10 + 7] = "form10 step ten, late"  # after window 10 closes: eventual only
    ssr[5 + 10 * 11 + 1] = "form0  first"  # two in window 11
    ssr[5 + 10 * 11 + 3] = "form1 second"
    crr_answers = ["Because it rains"] * (len(FORMS) - 11) + ["Because It Rains"]
    crr = {5 + 10 * n + 1: f"form{11 + n} because it rains" for n in range(len(FORMS) - 11)}
    # Equal after normalisation to the answer before it, reference in other case: TRACE
    # asks once; this project asks again.
    crr[5 + 10 * (len(FORMS) - 11) + 1] = f"FORM{len(FORMS) - 1}   Because it rains"
    lower = {6: "form2 chop", 16: "form3 fry"}  # a lower-case task type
    rec = {6: "3", 16: "three form1"}  # exact match: no judge
    return [
        Script(proactive("a-ssr", "SSR", ssr_answers), ssr),
        Script(proactive("b-crr", "CRR", crr_answers), crr),
        Script(proactive("c-lower", "ssr", ["chop", "fry"]), lower),
        Script(proactive("d-rec", "REC", ["3", "4"]), rec),
    ]


def release_scripts(release: Path, cache: Path) -> list[Script]:
    """A TRACE release's proactive records, an answer in each window and after every third
    one, each carrying the next reply form."""
    records = load_benchmark(str(release), cache).records
    plan, form = [], 0
    for record in records:
        if not isinstance(record, ProactiveRecord):
            continue
        said: dict[int, str] = {}
        for n, trigger in enumerate(sorted(record.triggers, key=lambda t: t.start_s)):
            moments = [math.ceil(trigger.start_s)] + (
                [math.ceil(trigger.start_s) + 6] * (n % 3 == 0)
            )
            for moment in moments:
                said.setdefault(moment, f"{trigger.answer} form{form % len(FORMS)}")
                form += 1
        plan.append(Script(record, said))
    return plan


def session(script: Script) -> SessionLog:
    record = script.record
    log = SessionLog("judged", record.record_id).start()
    first = int(record.instruction_time_s)
    end = int(max(t.start_s for t in record.triggers)) + 10
    for t in range(first, end):
        log.frame(float(t))
        if t == first:
            log.instruction(record)
        log.step()
        if t in script.said:
            log.respond(script.said[t])
        else:
            log.silent()
    log.finish()
    return log


def stored(path: Path, plan: list[Script]) -> str:
    url = f"sqlite:///{path}"
    with Store(url) as store:
        store_run(store, "judged", [s.record for s in plan], [session(s) for s in plan])
    return url


# ----------------------------------------------------------------------------- the oracle
# TRACE's rules, written again from its scoring.py, sharing no code with scorer/.

TRACE_PROMPT = """\
You are an expert evaluator for a video question answering task.

Task Type: {task_type}
Question: {question}
Reference Answer: {gt_answer}
Model Prediction: {prediction}

Evaluate whether the model prediction correctly conveys the same meaning as the
reference answer. Return only one decimal number between 0 and 1.

Scoring guide:
- 1.0: fully correct and semantically equivalent.
- 0.7-0.9: mostly correct with a minor omission or slight imprecision.
- 0.4-0.6: partially correct but missing important information.
- 0.1-0.3: mostly wrong but contains a small relevant element.
- 0.0: wrong, irrelevant, empty, or WAIT.

For SSR, compare the recognized action or step. For CRR, compare the causal
relationship or action. Output only the numeric score.
Score:"""


def trace_normalise(text: str) -> str:
    text = re.sub(r"<think>[\s\S]*?</think>\s*", "", text, flags=re.IGNORECASE)
    text = text.replace("<think>", "").replace("</think>", "")
    text = re.split(r"\n\s*(?:user|assistant|system)\s*\n", text, maxsplit=1, flags=re.I)[0]
    text = re.sub(r"^\s*[:：]\s*", "", text)
    return " ".join(text.strip().lower().split())


@dataclass
class Oracle:
    bodies: list[bytes]  # in the order TRACE first asks
    strict: dict[str, list[float]]  # per record, per window
    eventual: dict[str, list[float]]


def trace_oracle(plan: list[Script]) -> Oracle:
    verdicts: dict[tuple, float] = {}
    oracle = Oracle([], {}, {})

    def judged(record: ProactiveRecord, reference: str, text: str) -> float:
        if record.task_type.strip().upper() not in {"SSR", "CRR"}:
            return float(trace_normalise(text) == trace_normalise(reference))
        key = (
            record.task_type.strip().upper(),
            trace_normalise(record.instruction),
            trace_normalise(reference),
            trace_normalise(text),
        )
        if key not in verdicts:
            prompt = TRACE_PROMPT.format(
                task_type=record.task_type,
                question=record.instruction,
                gt_answer=reference,
                prediction=trace_normalise(text),
            )
            body = {"model": MODEL, "temperature": 0.0}
            body["messages"] = [{"role": "user", "content": prompt}]
            oracle.bodies.append(json.dumps(body, ensure_ascii=False).encode("utf-8"))
            form = int(_FORM.findall(trace_normalise(text))[-1])
            verdicts[key] = FORMS[form][1] or 0.0
        return verdicts[key]

    for script in sorted(plan, key=lambda s: s.record.record_id):
        record = script.record
        said = sorted((float(t), text) for t, text in script.said.items())
        windows = trace_windows(record)
        strict, used = [], set()
        for start, end, _eventual, answer in windows:
            inside = [i for i, (t, _x) in enumerate(said) if i not in used and start <= t < end]
            before = [i for i, (t, _x) in enumerate(said) if i not in used and t < start]
            if inside:
                used.add(inside[0])
                strict.append(judged(record, answer, said[inside[0]][1]))
            else:
                used.update(before[-1:])
                strict.append(0.0)
        eventual, taken = [], set()
        for start, _end, stop, answer in windows:
            free = [i for i, (t, _x) in enumerate(said) if i not in taken and start <= t < stop]
            taken.update(free[:1])
            eventual.append(judged(record, answer, said[free[0]][1]) if free else 0.0)
        oracle.strict[record.record_id] = strict
        oracle.eventual[record.record_id] = eventual
    return oracle


def trace_windows(record: ProactiveRecord) -> list[tuple[float, float, float, str]]:
    """(start, end, eventual end, answer) in time order: a point window lasts 5 s or up to
    the next later start, its eventual view up to that start (else its own end); a state
    interval keeps its end for both."""
    starts = sorted({trigger.start_s for trigger in record.triggers})
    windows = []
    for index, trigger in enumerate(record.triggers):
        later = [s for s in starts if s > trigger.start_s]
        if trigger.is_state:
            end = eventual = trigger.interval_end_s
        else:
            end = min([trigger.start_s + 5.0, *later[:1]])
            eventual = later[0] if later else end
        windows.append((trigger.start_s, end, index, eventual, trigger.answer))
    return [(s, e, v, a) for s, e, _i, v, a in sorted(windows)]


def window_scores(scores: RunScores, field: str) -> dict[str, list[float]]:
    return {
        record.record_id: [window[field] for window in record.proactive["windows"]]
        for record in scores.records
    }


def judge_for(server: StandInJudge) -> LLMJudge:
    config = LLMJudgeConfig(
        base_url=server.base_url, model=MODEL, timeout_s=TIMEOUT_S, backoff_s=0.01
    )
    return LLMJudge(config)


# ----------------------------------------------------------------------------- the tests


def judged_scripts(
    stand_in: StandInJudge, tmp_path: Path, profile: str
) -> tuple[Oracle, RunScores, list[bytes]]:
    """The release's scripted run scored under `profile` by the stand-in judge: TRACE's
    oracle of it, the scores, and the request bodies the scoring sent."""
    plan = scripts()
    with Store(stored(tmp_path / "store.db", plan), read_only=True) as store:
        before = len(stand_in.bodies)
        scores = score_run(store, "judged", profile, judge_for(stand_in))
    return trace_oracle(plan), scores, stand_in.bodies[before:]


def test_trace_paper_sends_traces_requests_and_scores_every_window_as_trace(
    stand_in: StandInJudge, tmp_path: Path
) -> None:
    oracle, scores, sent = judged_scripts(stand_in, tmp_path, "trace-paper-v1")
    # Byte for byte the bodies TRACE sends, one per verdict TRACE asks for (no retries).
    assert sorted(sent) == sorted(oracle.bodies)
    assert set(stand_in.paths[-len(sent) :]) == {"/v1/chat/completions"}  # with each body
    assert window_scores(scores, "score") == oracle.strict
    assert window_scores(scores, "eventual_score") == oracle.eventual
    windows = sum(len(v) for v in oracle.strict.values())
    accuracy = scores.overall["proactive"]["in_window_accuracy"]
    assert accuracy.value == pytest.approx(sum(map(sum, oracle.strict.values())) / windows)
    eventual = scores.overall["proactive"]["eventual_accuracy"]
    assert eventual.value == pytest.approx(sum(map(sum, oracle.eventual.values())) / windows)
    # Every failing form is one failed call scoring 0; the run is judge-incomplete.
    failing = sum(1 for _reply, trace, _ours in FORMS if trace is None)
    assert (scores.judge.calls, scores.judge.incomplete) == (len(oracle.bodies), True)
    assert scores.judge.failures + scores.judge.eventual_failures == failing
    assert scores.judge.template_version == "trace:osb-vlm-judge-v1"
    # The run exercised what it is about: the eventual-only answer, the shared verdict,
    # the lower-case task type judged.
    assert (oracle.strict["a-ssr"][10], oracle.eventual["a-ssr"][10]) == (0.0, 0.7)
    assert any(b"Reference Answer: Because it rains\\n" in body for body in sent)
    assert not any(b"Because It Rains" in body for body in sent)
    assert any(b"Task Type: ssr\\n" in body for body in sent)
    assert any(b"form10 step ten, late" in body for body in sent)


@pytest.mark.parametrize("release", ["fixture", "sample"])
def test_a_trace_release_is_judged_as_trace_judges_it(
    stand_in: StandInJudge, tmp_path: Path, release: str
) -> None:
    """The release fixture always, the real sample where ../shared/data is present."""
    path = FIXTURES / "trace_release" if release == "fixture" else sample("trace_release")
    plan = release_scripts(path, tmp_path / "benchmarks")
    oracle = trace_oracle(plan)
    with Store(stored(tmp_path / "store.db", plan), read_only=True) as store:
        before = len(stand_in.bodies)
        scores = score_run(store, "judged", "trace-paper-v1", judge_for(stand_in))
    assert sorted(stand_in.bodies[before:]) == sorted(oracle.bodies)
    assert window_scores(scores, "score") == oracle.strict
    assert window_scores(scores, "eventual_score") == oracle.eventual
    assert len(oracle.bodies) >= 10  # the release's SSR and CRR windows were judged


def test_trace_extended_keeps_this_projects_judge_and_disagrees_with_trace(
    stand_in: StandInJudge, tmp_path: Path
) -> None:
    oracle, scores, bodies = judged_scripts(stand_in, tmp_path, "trace-extended")
    sent = [json.loads(body) for body in bodies]
    assert {body["messages"][0]["role"] for body in sent} == {"system"}
    assert {(body["seed"], body["max_tokens"]) for body in sent} == {(0, 16)}
    prompts = [body["messages"][1]["content"] for body in sent]
    assert all("(also acceptable: fact " in prompt for prompt in prompts)
    assert any("Assistant's answer: <think>seen</think>  Form3: STEP 3" in p for p in prompts)
    assert not any("Task type: ssr" in prompt for prompt in prompts)  # exact match there
    # 429 and 500 are asked three times (two retries), a timeout too.
    asked = [int(_FORM.findall(prompt)[-1]) for prompt in prompts]
    assert [asked.count(n) for n in (14, 15, 16)] == [3, 3, 3]
    windows = window_scores(scores, "score")
    ours = [FORMS[n][2] or 0.0 for n in range(10)]
    assert windows["a-ssr"][:10] == ours
    assert windows != oracle.strict


def judged_by_clean_forms(task_type: str, word: str) -> tuple[list[int], list[Script]]:
    """One proactive record with a window per reply form TRACE accepts, each answered once
    (the stand-in judge answers `formN ...` in form N): the forms and the plan."""
    clean = [n for n, (_reply, trace, _ours) in enumerate(FORMS) if trace is not None]
    triggers = [f"{word.capitalize()} {n}" for n in range(len(clean))]
    said = {5 + 10 * i + 1: f"form{n} {word} {i}" for i, n in enumerate(clean)}
    return clean, [Script(proactive("clean", task_type, triggers), said)]


def test_a_second_score_from_the_cli_makes_no_judge_call(
    stand_in: StandInJudge, tmp_path: Path
) -> None:
    clean, plan = judged_by_clean_forms("SSR", "step")
    store = stored(tmp_path / "store.db", plan)
    command = ["score", "judged", "--store", store, "--json", "--judge-url", stand_in.base_url]
    command += ["--judge-model", MODEL, "--profile", "trace-paper-v1"]
    results = []
    for _ in range(2):
        before = len(stand_in.bodies)
        done = streameval(*command)  # in this test's cache directory (the fixture above)
        assert done.returncode == 0, done.stderr
        results.append((json.loads(done.stdout), len(stand_in.bodies) - before))
    (first, first_calls), (second, second_calls) = results
    assert (first_calls, second_calls) == (len(clean), 0)
    assert (first["judge"]["cache_hits"], second["judge"]["cache_hits"]) == (0, len(clean))
    assert second["overall"] == first["overall"]
    assert (tmp_path / "cache" / "judge_verdicts.sqlite").is_file()


def test_compare_report_and_the_results_api_reuse_the_verdicts(
    stand_in: StandInJudge, tmp_path: Path
) -> None:
    from fastapi.testclient import TestClient

    from streameval.scorer.compare import compare_runs
    from streameval.scorer.service.api import create_app
    from streameval.scorer.service.html_report import write_report

    clean, plan = judged_by_clean_forms("CRR", "cause")
    url = stored(tmp_path / "store.db", plan)
    before = len(stand_in.bodies)
    with Store(url, read_only=True) as store:
        first = score_run(store, "judged", "trace-paper-v1", judge_for(stand_in))
        assert len(stand_in.bodies) - before == len(clean)
        before = len(stand_in.bodies)
        compared = compare_runs(store, "judged", "judged", "trace-paper-v1", judge_for(stand_in))
        write_report(store, "judged", tmp_path / "r.html", "trace-paper-v1", judge_for(stand_in))
    app = create_app(url, judge_for(stand_in))
    with TestClient(app) as client:
        served = client.get("/runs/judged/metrics", params={"profile": "trace-paper-v1"})
    assert served.status_code == 200
    assert len(stand_in.bodies) == before  # every verdict came from the cache
    accuracy = first.overall["proactive"]["in_window_accuracy"].value
    assert served.json()["overall"]["proactive"]["in_window_accuracy"]["value"] == accuracy
    assert compared.overall["proactive"]["in_window_accuracy"].a == accuracy

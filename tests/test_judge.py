"""The LLM judge under this project's judge rules (the `-extended` profiles) against a real
OpenAI-compatible HTTP server on loopback: prompts and parameters, retries, unparsable
replies, failures, bounded concurrency, the verdict cache. TRACE's judge rules:
tests/test_trace_judge.py."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from streameval.core.benchmark.records import ProactiveRecord, Trigger
from streameval.core.store.store import Store
from streameval.scorer.eventlog import SessionLog, store_run
from streameval.scorer.judging.judges import (
    TEMPLATE_VERSION,
    JudgeError,
    JudgeRequest,
    LLMJudge,
    LLMJudgeConfig,
    parse_verdict,
)
from streameval.scorer.report import score_exported, score_run


class FakeJudgeServer:
    """chat.completions that grades by substring: the reply is "1" when the reference
    occurs in the answer, else "0". Answers containing "flaky" fail once with 503, "down"
    always fail with 500, "rambling" get an unparsable reply."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._failed_once: set[str] = set()
        self._lock = threading.Lock()
        app = FastAPI()
        app.post("/v1/chat/completions")(self._complete)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]})
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)

    async def _complete(self, request: Request) -> JSONResponse:
        import asyncio

        body = await request.json()
        with self._lock:
            self.bodies.append(body)
            self.headers.append(dict(request.headers))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.02)
            prompt = body["messages"][-1]["content"]
            reference = re.search(r"Reference answer: (.*)", prompt).group(1)
            answer = re.search(r"Assistant's answer: (.*)", prompt).group(1)
            if "down" in answer:
                return JSONResponse({"error": "overloaded"}, status_code=500)
            if "flaky" in answer and answer not in self._failed_once:
                self._failed_once.add(answer)
                return JSONResponse({"error": "warming up"}, status_code=503)
            if "rambling" in answer:
                reply = "The answer seems mostly right to me."
            else:
                reply = "1" if reference.split(" (")[0].lower() in answer.lower() else "0"
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": reply},
                            "finish_reason": "stop",
                        }
                    ],
                }
            )
        finally:
            with self._lock:
                self.in_flight -= 1

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _own_verdict_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each test starts with an empty verdict cache (it lives in the cache directory)."""
    monkeypatch.setenv("STREAMEVAL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def server() -> Iterator[FakeJudgeServer]:
    running = FakeJudgeServer()
    yield running
    running.close()


def judge_for(server: FakeJudgeServer, **changes) -> LLMJudge:
    config = {"base_url": server.base_url, "model": "judge-model", "backoff_s": 0.01, "retries": 2}
    return LLMJudge(LLMJudgeConfig(**(config | changes)))


def ssr(record_id: str, answers: tuple[str, ...], task_type: str = "SSR") -> ProactiveRecord:
    return ProactiveRecord(
        record_id=record_id,
        source_id=record_id,
        source_benchmark="handwritten",
        task_type=task_type,
        video_path=f"{record_id}.mp4",
        instruction="Tell me each new step of the recipe.",
        instruction_time_s=0.0,
        triggers=tuple(
            Trigger(trigger_type="event_onset", answer=answer, point_s=5.0 + 10 * n)
            for n, answer in enumerate(answers)
        ),
    )


def said(rec: ProactiveRecord, texts: list[str]) -> SessionLog:
    """Frames each second; the n-th text is said 1 s into the n-th window."""
    log = SessionLog("judged", rec.record_id).start()
    at = {6 + 10 * n: text for n, text in enumerate(texts)}
    for t in range(10 * len(texts) + 5):
        log.frame(float(t))
        if t == 0:
            log.instruction(rec)
        log.step()
        if t in at:
            log.respond(at[t])
        else:
            log.silent()
    log.finish()
    return log


def judged_run(store: Store) -> None:
    semantic = ssr("p1", ("chop onions", "fry onions", "add rice", "stir"))
    exact = ssr("p2", ("3",), task_type="REC")
    logs = [
        said(semantic, ["now I chop onions", "flaky: fry onions", "rambling", "down"]),
        said(exact, ["3"]),
    ]
    store_run(store, "judged", [semantic, exact], logs)


def test_requests_carry_the_prompt_and_fixed_parameters(
    server: FakeJudgeServer, monkeypatch
) -> None:
    monkeypatch.setenv("STREAMEVAL_JUDGE_API_KEY", "secret-key")
    judge = judge_for(server, seed=1234, temperature=0.0)
    request = JudgeRequest(
        "CRR",
        "Why will it rain?",
        "clouds",
        "dark clouds",
        ("grey sky",),
        True,
        judge_rules="extended",
    )
    before = len(server.bodies)
    scores, summary = judge.judge([request, request])
    assert scores == {request: 1.0}
    assert (summary.requests, summary.unique, summary.llm_judged, summary.calls) == (2, 1, 1, 1)
    body, headers = server.bodies[before], server.headers[before]
    assert (body["model"], body["temperature"], body["seed"]) == ("judge-model", 0.0, 1234)
    assert "Reference answer: clouds (also acceptable: grey sky)" in body["messages"][-1]["content"]
    assert "Assistant's answer: dark clouds" in body["messages"][-1]["content"]
    assert headers["authorization"] == "Bearer secret-key"
    assert summary.template_version == TEMPLATE_VERSION


def test_scoring_with_retries_failures_and_the_cache(
    server: FakeJudgeServer, tmp_path: Path
) -> None:
    with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        judged_run(store)
        first = score_run(store, "judged", "trace-extended", judge_for(server))
        judge = first.judge
        # Four semantic judgements (SSR); the REC answer is matched exactly.
        assert (judge.kind, judge.semantic, judge.exact) == ("llm", 4, 1)
        # "flaky" needed a retry; "down" failed 3 times; "rambling" was unparsable.
        assert (judge.llm_judged, judge.failures, judge.cache_hits) == (2, 2, 0)
        assert judge.calls == 4 + 1 + 2
        assert judge.incomplete
        assert any("HTTP 500 (3 attempts)" in reason for reason in judge.failure_reasons)
        assert any("unparsable judge reply" in reason for reason in judge.failure_reasons)
        assert any(note.startswith("judge-incomplete: 2 of 4") for note in first.notes)
        windows = first.records[0].proactive["windows"]
        assert [w["score"] for w in windows] == [1.0, 1.0, 0.0, 0.0]
        assert first.overall["proactive"]["in_window_accuracy"].value == pytest.approx(3 / 5)

        # Second scoring: the two good verdicts come from the cache; failures are retried.
        calls_before = len(server.bodies)
        second = score_run(store, "judged", "trace-extended", judge_for(server))
        assert (second.judge.cache_hits, second.judge.llm_judged, second.judge.failures) == (
            2,
            0,
            2,
        )
        assert len(server.bodies) - calls_before == 1 + 3  # "rambling" once, "down" 3 times
        assert second.overall == first.overall


@pytest.mark.parametrize(
    ("profile", "incomplete"), [("trace-extended", False), ("trace-paper-v1", True)]
)
def test_without_an_endpoint_semantic_tasks_fall_back_to_exact(
    tmp_path: Path, profile: str, incomplete: bool
) -> None:
    with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        judged_run(store)
        scores = score_run(store, "judged", profile)
    assert (scores.judge.kind, scores.judge.fallback, scores.judge.incomplete) == (
        "exact",
        True,
        incomplete,
    )
    assert any("no judge endpoint configured" in note for note in scores.notes)
    # TRACE marks a fallback judge-incomplete; this project's rules only note it.
    marked = [note for note in scores.notes if note.startswith("judge-incomplete: TRACE's")]
    assert len(marked) == int(incomplete)
    # Exact match: none of the SSR paraphrases equals its reference; the REC "3" does.
    assert scores.overall["proactive"]["in_window_accuracy"].value == pytest.approx(1 / 5)


def test_an_unreachable_endpoint_counts_failures(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    judge = LLMJudge(
        LLMJudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", retries=1, backoff_s=0.01)
    )
    request = JudgeRequest("SSR", "q", "stir", "stir it", semantic=True, judge_rules="extended")
    scores, summary = judge.judge([request])
    assert scores == {request: 0.0}
    assert (summary.failures, summary.calls) == (1, 2)
    assert "failed" in summary.failure_reasons[0] and "(2 attempts)" in summary.failure_reasons[0]
    # TRACE's rules ask once.
    as_trace = JudgeRequest("SSR", "q", "stir", "stir it", semantic=True)
    scores, summary = judge.judge([as_trace])
    assert scores == {as_trace: 0.0}
    assert (summary.failures, summary.calls) == (1, 1)


def test_concurrency_is_bounded(server: FakeJudgeServer) -> None:
    server.most_in_flight = 0
    requests = [
        JudgeRequest("SSR", "q", "stir", f"stir {n}", semantic=True, judge_rules="extended")
        for n in range(12)
    ]
    scores, summary = judge_for(server, concurrency=3).judge(requests)
    assert set(scores.values()) == {1.0}
    assert summary.llm_judged == 12
    assert server.most_in_flight == 3


def test_exported_logs_can_be_judged_too(server: FakeJudgeServer, tmp_path: Path) -> None:
    from streameval.core.store.export import export_jsonl

    with Store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        judged_run(store)
        path = tmp_path / "judged.jsonl"
        with path.open("w") as handle:
            export_jsonl(store, "judged", handle)
        stored = score_run(store, "judged", "trace-extended", judge_for(server))
    exported = score_exported(path, "trace-extended", judge_for(server))
    assert exported.overall == stored.overall
    # The verdict cache is no part of the store: the export reuses the two good verdicts.
    assert (stored.judge.cache_hits, exported.judge.cache_hits) == (0, 2)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("1", 1.0),
        ("0", 0.0),
        ("0.5", 0.5),
        (" 1.0\n", 1.0),
        ("Score: 0.75", 0.75),
        (".25", 0.25),
        ('{"score": 1}', 1.0),
        ("1.", 1.0),
    ],
)
def test_parse_verdict(reply: str, score: float) -> None:
    assert parse_verdict(reply) == score


@pytest.mark.parametrize(
    "reply", ["yes", "2", "-1", "0.5 because", '{"score": 3}', '{"grade": 1}', "", "1.5"]
)
def test_unparsable_verdicts(reply: str) -> None:
    with pytest.raises(JudgeError):
        parse_verdict(reply)

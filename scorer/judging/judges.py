"""Judges of response content: normalised exact match, and an LLM over any
OpenAI-compatible chat endpoint (vLLM serving a judge model, or a hosted API).

Scoring collects every content judgement of a run first, then judges them in one batch:
exact ones locally, semantic ones through the LLM judge (bounded concurrency, verdicts kept
in the sidecar cache of cache.py). Each request names the judge rules of its profile:
"trace" asks as TRACE's public scorer does (trace_judge.py: its prompt, the normalised
answer, one attempt, its reply parsing); "extended" is this project's judge (a system
message, the accepted facts with the reference, the raw answer, a fixed seed, 16 tokens,
retries after timeouts, 429 and 5xx, a strict reply parser). A judgement that fails scores
0, is counted, and marks the run judge-incomplete. Without an endpoint, semantic judgements
fall back to exact match and the results say so.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from streameval.scorer.errors import ScoreError
from streameval.scorer.judging import trace_judge
from streameval.scorer.judging.cache import CachedVerdict, JudgeCache
from streameval.scorer.parsing import normalise, normalise_extended

TEMPLATE_VERSION = "streameval-judge-v1"
# The prompt version of each judge rule set; it keys the verdict cache.
RULES_VERSIONS = {"trace": f"trace:{trace_judge.PROMPT_VERSION}", "extended": TEMPLATE_VERSION}
SYSTEM_PROMPT = (
    "You grade answers of a video assistant. You see the task, the reference answer and the "
    "assistant's answer. Judge only whether the assistant's answer states the same thing as "
    "the reference (wording may differ). Reply with one number from 0 to 1 and nothing else: "
    "1 = equivalent, 0 = wrong or unrelated, values in between = partly right."
)
USER_TEMPLATE = (
    "Task type: {task_type}\n"
    "Task: {question}\n"
    "Reference answer: {reference}\n"
    "Assistant's answer: {prediction}\n"
    "Score:"
)
_NUMBER = re.compile(r"(?:score\s*[:=]?\s*)?(1(?:\.0*)?|0(?:\.\d*)?|\.\d+)\s*\.?", re.I)
_MAX_REASONS = 5  # distinct failure reasons kept for the report


class JudgeError(ScoreError):
    """A judge call that did not produce a score (network, HTTP status, unparsable reply)."""


@dataclass(frozen=True, slots=True)
class JudgeRequest:
    """One content judgement: does `prediction` state `reference` (or an accepted fact)?"""

    task_type: str
    question: str
    reference: str
    prediction: str
    accepted: tuple[str, ...] = ()  # shown to the semantic judge with the reference
    semantic: bool = False  # the profile sends this task type to the semantic judge
    # How exact matching reads the texts (the profile's): TRACE's normalisation and the
    # reference only, or this project's normalisation accepting the accepted facts too.
    normalisation: str = "trace"
    exact_accepts_facts: bool = False
    judge_rules: str = "trace"  # how the LLM judge is asked: "trace" (TRACE's) | "extended"
    # A judgement of a reported window (in-window); False for TRACE's eventual view, whose
    # failures, as in TRACE, do not mark the run judge-incomplete. Not part of the request's
    # identity: both views share one judgement of the same texts.
    primary: bool = field(default=True, compare=False)

    def reference_text(self) -> str:
        if not self.accepted:
            return self.reference
        return f"{self.reference} (also acceptable: {'; '.join(self.accepted)})"


def exact_score(request: JudgeRequest) -> float:
    norm = normalise_extended if request.normalisation == "extended" else normalise
    prediction = norm(request.prediction)
    references = (request.reference, *(request.accepted if request.exact_accepts_facts else ()))
    return 1.0 if any(prediction == norm(ref) for ref in references) else 0.0


def parse_verdict(reply: str) -> float:
    """The judge's reply as a score in [0, 1]: "1", "0.5", "Score: 0.8", {"score": 1}."""
    text = reply.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)["score"]
        except (ValueError, KeyError, TypeError):
            raise JudgeError(f"unparsable judge reply {text[:80]!r}") from None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise JudgeError(f"judge score {value!r} is not a number in [0, 1]")
        return float(value)
    match = _NUMBER.fullmatch(text)
    if match is None:
        raise JudgeError(f"unparsable judge reply {text[:80]!r}")
    return float(match.group(1))


@dataclass
class JudgeSummary:
    """How a run's content judgements were made; stored with its results."""

    kind: str  # "exact" | "llm"
    requests: int = 0  # judgements asked for (duplicates included)
    unique: int = 0
    semantic: int = 0  # unique primary judgements of semantic task types
    exact: int = 0  # unique judgements made by exact match
    cache_hits: int = 0
    llm_judged: int = 0  # judged by calling the endpoint
    calls: int = 0  # HTTP requests made (retries included)
    failures: int = 0  # failed primary judgements (they mark the run judge-incomplete)
    eventual_failures: int = 0  # failed judgements made only for the eventual view
    failure_reasons: list[str] = field(default_factory=list)
    fallback: bool = False  # semantic judgements fell back to exact match
    # TRACE marks a run judge-incomplete when its semantic task types fell back to exact
    # match; this project's judge rules only note the fallback.
    fallback_incomplete: bool = False
    model: str | None = None
    base_url: str | None = None
    template_version: str | None = None
    note: str | None = None

    @property
    def incomplete(self) -> bool:
        return self.failures > 0 or self.fallback_incomplete


class ExactJudge:
    """Normalised exact match for every judgement (the offline fallback)."""

    kind = "exact"

    def judge(
        self, requests: Sequence[JudgeRequest]
    ) -> tuple[dict[JudgeRequest, float], JudgeSummary]:
        unique = list(dict.fromkeys(requests))
        primary = _primary(requests)
        semantic = sum(1 for request in unique if request.semantic and request in primary)
        summary = JudgeSummary(
            kind="exact",
            requests=len(requests),
            unique=len(unique),
            semantic=semantic,
            exact=len(unique),
            fallback=True,
            fallback_incomplete=any(r.semantic and r.judge_rules == "trace" for r in unique),
            note=(
                "no judge endpoint configured: semantic task types are scored by normalised "
                "exact match"
            ),
        )
        return {request: exact_score(request) for request in unique}, summary


@dataclass(frozen=True)
class LLMJudgeConfig:
    base_url: str  # e.g. http://127.0.0.1:8000/v1 (the path before /chat/completions)
    model: str
    api_key_env: str = "STREAMEVAL_JUDGE_API_KEY"
    temperature: float = 0.0
    timeout_s: float = 60.0  # TRACE's too
    # This project's judge rules only (TRACE sends neither and asks once):
    seed: int = 0
    max_tokens: int = 16
    retries: int = 2  # further attempts after a network error, 429 or 5xx
    backoff_s: float = 0.5  # doubled after every retry
    concurrency: int = 8

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise JudgeError(
                f"judge URL must start with http:// or https://, got {self.base_url!r}"
            )
        if not self.model:
            raise JudgeError("a judge endpoint needs a model name (--judge-model)")
        if self.concurrency < 1 or self.retries < 0 or self.timeout_s <= 0:
            raise JudgeError("judge concurrency >= 1, retries >= 0 and timeout > 0 are required")


class LLMJudge:
    """Semantic judgements through an OpenAI-compatible endpoint; the rest by exact match."""

    kind = "llm"

    def __init__(self, config: LLMJudgeConfig, cache: JudgeCache | None = None) -> None:
        self.config = config
        self.cache = cache

    def with_cache(self, cache: JudgeCache) -> LLMJudge:
        return LLMJudge(self.config, cache)

    def key(self, request: JudgeRequest) -> str:
        """The verdict's identity: requests with one key share one verdict (TRACE's rules:
        equal after normalisation; this project's: equal texts, accepted facts included)."""
        if request.judge_rules == "trace":
            asked = trace_judge.verdict_key(
                request.task_type, request.question, request.reference, request.prediction
            )
        else:
            asked = [
                request.task_type,
                request.question,
                request.reference_text(),
                request.prediction,
            ]
        fields = [RULES_VERSIONS[request.judge_rules], self.config.model, *asked]
        text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def judge(
        self, requests: Sequence[JudgeRequest]
    ) -> tuple[dict[JudgeRequest, float], JudgeSummary]:
        unique = list(dict.fromkeys(requests))
        primary = _primary(requests)
        semantic = [request for request in unique if request.semantic]
        summary = JudgeSummary(
            kind="llm",
            requests=len(requests),
            unique=len(unique),
            semantic=sum(1 for request in semantic if request in primary),
            exact=len(unique) - len(semantic),
            model=self.config.model,
            base_url=self.config.base_url,
            template_version=", ".join(sorted({RULES_VERSIONS[r.judge_rules] for r in semantic}))
            or None,
        )
        scores = {request: exact_score(request) for request in unique if not request.semantic}
        # Requests sharing a key share one verdict; the first of them is the one asked.
        groups: dict[str, list[JudgeRequest]] = {}
        for request in semantic:
            if request.judge_rules == "trace" and not normalise(request.prediction):
                scores[request] = 0.0  # TRACE scores an empty answer 0 without asking
                continue
            groups.setdefault(self.key(request), []).append(request)
        cached = self.cache.get_many(groups) if self.cache and groups else {}
        for key, score in cached.items():
            for request in groups[key]:
                scores[request] = score
            summary.cache_hits += len(groups[key])
        misses = [(key, members) for key, members in groups.items() if key not in cached]
        if not misses:
            return scores, summary
        verdicts = _run(self._ask_all([members[0] for _, members in misses], summary))
        fresh = []
        for (key, members), verdict in zip(misses, verdicts, strict=True):
            if isinstance(verdict, JudgeError):
                score = 0.0
                failed = sum(1 for request in members if request in primary)
                summary.failures += failed
                summary.eventual_failures += len(members) - failed
                reasons = summary.failure_reasons
                if str(verdict) not in reasons and len(reasons) < _MAX_REASONS:
                    reasons.append(str(verdict))
            else:
                score, reply = verdict
                summary.llm_judged += len(members)
                fresh.append(self._cached(key, members[0], score, reply))
            for request in members:
                scores[request] = score
        if self.cache is not None:
            self.cache.put_many(fresh)
        return scores, summary

    def _cached(self, key: str, request: JudgeRequest, score: float, reply: str) -> CachedVerdict:
        return CachedVerdict(
            key=key,
            rules=RULES_VERSIONS[request.judge_rules],
            model=self.config.model,
            request=json.dumps(
                {
                    "task_type": request.task_type,
                    "question": request.question,
                    "reference": request.reference_text(),
                    "prediction": request.prediction,
                },
                ensure_ascii=False,
            ),
            score=score,
            reply=reply,
        )

    async def _ask_all(
        self, requests: list[JudgeRequest], summary: JudgeSummary
    ) -> list[tuple[float, str] | JudgeError]:
        gate = asyncio.Semaphore(self.config.concurrency)
        headers = {}
        api_key = os.environ.get(self.config.api_key_env)
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        async with httpx.AsyncClient(timeout=self.config.timeout_s, headers=headers) as client:

            async def one(request: JudgeRequest) -> tuple[float, str] | JudgeError:
                async with gate:
                    try:
                        if request.judge_rules == "trace":
                            return await self._ask_as_trace(client, request, summary)
                        return await self._ask(client, request, summary)
                    except JudgeError as error:
                        return error

            return list(await asyncio.gather(*(one(request) for request in requests)))

    @property
    def _url(self) -> str:
        return self.config.base_url.rstrip("/") + "/chat/completions"

    async def _ask_as_trace(
        self, client: httpx.AsyncClient, request: JudgeRequest, summary: JudgeSummary
    ) -> tuple[float, str]:
        """One attempt, TRACE's body and reply parsing; any failure is final."""
        body = trace_judge.request_body(
            self.config.model,
            self.config.temperature,
            request.task_type,
            request.question,
            request.reference,
            request.prediction,
        )
        summary.calls += 1
        try:
            response = await client.post(
                self._url, content=body, headers={"Content-Type": "application/json"}
            )
        except httpx.TimeoutException:
            raise JudgeError(
                f"judge call to {self._url} timed out after {self.config.timeout_s:g}s"
            ) from None
        except httpx.TransportError as exc:
            raise JudgeError(
                f"judge call to {self._url} failed: {exc or type(exc).__name__}"
            ) from None
        if response.status_code >= 400:
            raise JudgeError(f"judge endpoint answered HTTP {response.status_code}")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(
                f"judge endpoint sent no chat completion: {response.text[:200]}"
            ) from None
        reply = trace_judge.reply_text(content)
        score = trace_judge.parse_score(reply)
        if score is None:
            raise JudgeError(f"judge reply holds no score in [0, 1]: {reply[:80]!r}")
        return score, reply

    async def _ask(
        self, client: httpx.AsyncClient, request: JudgeRequest, summary: JudgeSummary
    ) -> tuple[float, str]:
        url = self._url
        body = {
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {
                    "role": "user",
                    "content": USER_TEMPLATE.format(
                        task_type=request.task_type,
                        question=request.question,
                        reference=request.reference_text(),
                        prediction=request.prediction,
                    ),
                },
            ],
            "temperature": self.config.temperature,
            "seed": self.config.seed,
            "max_tokens": self.config.max_tokens,
        }
        problem = ""
        for attempt in range(self.config.retries + 1):
            if attempt:
                await asyncio.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            summary.calls += 1
            try:
                response = await client.post(url, json=body)
            except httpx.TimeoutException:
                problem = f"judge call to {url} timed out after {self.config.timeout_s:g}s"
                continue
            except httpx.TransportError as exc:
                problem = f"judge call to {url} failed: {exc or type(exc).__name__}"
                continue
            if response.status_code == 429 or response.status_code >= 500:
                problem = f"judge endpoint answered HTTP {response.status_code}"
                continue
            if response.status_code >= 400:
                raise JudgeError(
                    f"judge endpoint answered HTTP {response.status_code}: {response.text[:200]}"
                )
            reply = _content(response)
            return parse_verdict(reply), reply
        raise JudgeError(f"{problem} ({self.config.retries + 1} attempts)")


Judge = ExactJudge | LLMJudge


def _primary(requests: Sequence[JudgeRequest]) -> set[JudgeRequest]:
    """The requests some primary judgement asks for (equality ignores `primary`)."""
    return {request for request in requests if request.primary}


def _content(response: httpx.Response) -> str:
    try:
        content = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise JudgeError(f"judge endpoint sent no chat completion: {response.text[:200]}") from None
    if not isinstance(content, str):
        raise JudgeError(f"judge endpoint sent non-text content {content!r:.80}")
    return content


def _run(coroutine):
    """Run the judge's event loop, also when the caller is inside one (a web handler)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()

"""TRACE's LLM judge, as its public scorer calls it (om-ai-lab/trace-bench,
src/trace_bench/scoring.py at c354967e: `VLM_JUDGE_PROMPT`, `VLMJudge.score`,
`_parse_judge_score`, `JudgeRouter.score`), for the TRACE profiles.

What the published numbers depend on, rule for rule:
- one user message: the prompt template below with the task type as the record has it, the
  instruction, the window's reference answer as annotated (no accepted facts) and the
  *normalised* answer (scorer/parsing.py `normalise`, TRACE's `normalize_text`);
- the body is `{"model", "temperature", "messages"}`, serialised by `json.dumps` with its
  default separators and `ensure_ascii=False`: no seed, no max_tokens;
- an answer that normalises to nothing scores 0 without a call;
- one attempt: a network error, timeout or HTTP error, or a reply that holds no number in
  [0, 1], scores 0 (and marks the run judge-incomplete);
- a reply is the number it is (after stripping spaces and backticks), else the first 0/1
  decimal standing alone anywhere in it (`The prediction is correct. 1`, `**1**`,
  `0.9 - mostly correct`, a number inside a think block); `0.75.` and `Score: 0.7.` hold none;
- verdicts are shared by requests equal after normalisation: the upper-cased task type and
  the normalised instruction, reference and answer.
"""

from __future__ import annotations

import json
import re

from streameval.scorer.parsing import normalise

PROMPT_VERSION = "osb-vlm-judge-v1"  # TRACE's VLM_JUDGE_PROMPT_VERSION
# The exact bytes of TRACE's VLM_JUDGE_PROMPT (a protocol fact: the judge model reads it).
PROMPT_TEMPLATE = (
    "You are an expert evaluator for a video question answering task.\n"
    "\n"
    "Task Type: {task_type}\n"
    "Question: {question}\n"
    "Reference Answer: {gt_answer}\n"
    "Model Prediction: {prediction}\n"
    "\n"
    "Evaluate whether the model prediction correctly conveys the same meaning as the\n"
    "reference answer. Return only one decimal number between 0 and 1.\n"
    "\n"
    "Scoring guide:\n"
    "- 1.0: fully correct and semantically equivalent.\n"
    "- 0.7-0.9: mostly correct with a minor omission or slight imprecision.\n"
    "- 0.4-0.6: partially correct but missing important information.\n"
    "- 0.1-0.3: mostly wrong but contains a small relevant element.\n"
    "- 0.0: wrong, irrelevant, empty, or WAIT.\n"
    "\n"
    "For SSR, compare the recognized action or step. For CRR, compare the causal\n"
    "relationship or action. Output only the numeric score.\n"
    "Score:"
)
# A 0/1 decimal not touching another digit or dot: "0.75." holds none, "**1**" holds 1.
_LONE_SCORE = re.compile(r"(?<![\d.])(?:0(?:\.\d+)?|1(?:\.0+)?)(?![\d.])")


def verdict_key(task_type: str, question: str, reference: str, prediction: str) -> list[str]:
    """The fields two requests must share to share TRACE's verdict."""
    return [
        task_type.strip().upper(),
        normalise(question),
        normalise(reference),
        normalise(prediction),
    ]


def request_body(
    model: str, temperature: float, task_type: str, question: str, reference: str, prediction: str
) -> bytes:
    prompt = PROMPT_TEMPLATE.format(
        task_type=task_type,
        question=question,
        gt_answer=reference,
        prediction=normalise(prediction),
    )
    payload = {
        "model": model,
        "temperature": temperature,
        "messages": [{"role": "user", "content": prompt}],
    }
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def reply_text(content: object) -> str:
    """The message content as TRACE reads it: a list of parts joined by their text."""
    if isinstance(content, list):
        content = "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return str(content).strip()


def parse_score(reply: str) -> float | None:
    """The reply's score, or None where TRACE finds no score in [0, 1]."""
    candidate = reply.strip().strip("`").strip()
    try:
        value = float(candidate)
    except ValueError:
        match = _LONE_SCORE.search(candidate)
        if match is None:
            return None
        value = float(match.group(0))
    return value if 0.0 <= value <= 1.0 else None

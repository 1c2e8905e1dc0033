"""Stages 1-4 of `streameval synth` against the scripted OpenAI-compatible stand-in
(tests/openai_stand_in.py): each stage's prompt, images and parsing, the retries, a failed
call skipping its video, and the causal roll-out on hand-made relevance matrices.

Videos are real H.264 files (tests/timeline_fixtures.py: 64x48, frame n a flat grey) sampled
by the Core's frame cache; the stand-in's "model" (`ScriptedModel`) reads each request's
prompt and frame labels, so the tests can tell exactly which frames each call carried.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from streameval.core.frames.cache import FrameCache
from streameval.core.frames.types import ImageRules
from streameval.synth import prompts
from streameval.synth.client import CallFailed, ModelClient, ModelSettings
from streameval.synth.models import Action
from streameval.synth.pipeline import SynthOptions, synthesise, synthesise_video
from streameval.synth.rollout import pick_question, roll_out, tie_breaker
from streameval.synth.stages import CausalityError, SampledVideo, spread
from streameval.synth.taxonomy import CATEGORIES
from tests.openai_stand_in import FakeOpenAIServer, Reply, images, labels, prompt_of
from tests.timeline_fixtures import write_video

QUESTIONS = ["How many grey frames?", "Is it dark now?"]


def stage_of(prompt: str) -> str:
    """Which stage a request belongs to, read from its prompt's wording."""
    for marker, stage in (
        ("Task: choose the streaming task category", "category"),
        ("Task: write ", "questions"),
        ("Task: does this segment show", "relevance"),
        ("respond to the viewer.", "response"),
    ):
        if marker in prompt:
            return stage
    raise AssertionError(f"unknown prompt: {prompt[:80]!r}")


@dataclass
class ScriptedModel:
    """A "model" for the stand-in. `relevant` holds the (segment start in s, question
    index) pairs it answers yes to; `replies[stage]` overrides the replies of a stage, one
    per call in order (the last one repeats)."""

    category: str = "TA"
    questions: list[str] = field(default_factory=lambda: list(QUESTIONS))
    relevant: set[tuple[float, int]] = field(default_factory=set)
    replies: dict[str, list[Reply]] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)

    def __call__(self, body: dict, index: int) -> Reply:
        prompt = prompt_of(body)
        stage = stage_of(prompt)
        count = self.seen.get(stage, 0)
        self.seen[stage] = count + 1
        if stage in self.replies:
            scripted = self.replies[stage]
            return scripted[min(count, len(scripted) - 1)]
        if stage == "category":
            return Reply([self.category])
        if stage == "questions":
            return Reply([json.dumps(self.questions)])
        k = self.question_index(prompt)
        if stage == "relevance":
            start = float(re.search(r"from ([\d.]+)s to", prompt).group(1))
            return Reply(["yes" if (start, k) in self.relevant else "no"])
        return Reply([f"q{k} at {labels(body)[-1]:g}s"])

    def question_index(self, prompt: str) -> int:
        text = re.search(r"Question: (.*)\n", prompt).group(1)
        return self.questions.index(text)


def requests_of(server: FakeOpenAIServer, stage: str) -> list[dict]:
    return [body for body in server.requests if stage_of(prompt_of(body)) == stage]


def sampled(tmp_path: Path, seconds: int, fps: float, segment_s: float) -> SampledVideo:
    video = tmp_path / f"v{seconds}.mp4"
    write_video(video, seconds=seconds)
    frames = FrameCache(tmp_path / "frames").get(video, ImageRules(fps=fps, max_width=64))
    return SampledVideo.of(str(video), frames, segment_s)


def client_for(server: FakeOpenAIServer, tmp_path: Path, retries: int = 2) -> ModelClient:
    settings = ModelSettings(
        base_url=server.base_url, model="fake-vl", seed=7, retries=retries, retry_backoff_s=0.01
    )
    return ModelClient(settings, tmp_path / "calls.jsonl")


def read_calls(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


async def run_video(
    server: FakeOpenAIServer, tmp_path: Path, video: SampledVideo, **options
) -> object:
    client = client_for(server, tmp_path, options.pop("retries", 2))
    try:
        return await synthesise_video(client, video, SynthOptions(**options))
    finally:
        await client.aclose()


# --------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("code", list(CATEGORIES))
def test_every_prompt_quotes_the_category_definition_and_the_reply_form(code: str) -> None:
    category = CATEGORIES[code]
    classify = prompts.classify_prompt(16, 30.0)
    assert classify.startswith("The images above are 16 frames spread evenly over a video of 30")
    assert f"- {code} ({category.name}): {category.behaviour}\n" in classify
    assert classify.endswith(prompts.CLASSIFY_FORMAT)

    asked = prompts.questions_prompt(code, 3, 16, 30.0)
    assert f"of the category {code} ({category.name}): {category.behaviour}\n" in asked
    assert f"Objective: {category.objective}, so that the assistant learns to " in asked
    assert asked.endswith(
        "Reply with a JSON list of exactly 3 strings, the questions, and "
        'nothing else, e.g. ["first question?", "second question?"].'
    )

    relevance = prompts.relevance_prompt(code, "Is it red?", 2.0, 4.0)
    assert "one short segment of a video, from 2s to 4s.\n" in relevance
    assert f"{category.behaviour}\nQuestion: Is it red?\n" in relevance
    assert relevance.endswith("Reply with yes or no only.")

    response = prompts.response_prompt(code, "Is it red?", 6.0)
    assert "from its start up to now, 6 seconds into the video." in response
    assert f"{category.behaviour}\nQuestion: Is it red?\n" in response
    assert response.endswith(prompts.RESPONSE_FORMAT)


def test_the_taxonomy_is_the_papers() -> None:
    assert list(CATEGORIES) == ["IV", "MD", "TA", "AM", "DED"]
    names = [c.name for c in CATEGORIES.values()]
    assert names == [
        "Immediate Visual",
        "Memory-Dependent",
        "Temporal Aggregation",
        "Anticipatory Monitoring",
        "Dynamic Event Description",
    ]
    assert CATEGORIES["TA"].objective == "Generate counting questions over repeated actions"
    assert CATEGORIES["AM"].behaviour.startswith("Stay silent until a triggering visual cue")


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [
        ("TA", "TA"),
        (" **ded**.\n", "DED"),
        ('"AM"', "AM"),
        ("Temporal Aggregation", None),
        ("TA, MD", None),
        ("", None),
    ],
)
def test_a_category_reply_is_one_code(reply: str, parsed: str | None) -> None:
    if parsed is None:
        with pytest.raises(prompts.ReplyError, match="expected one of IV, MD, TA, AM, DED"):
            prompts.parse_category(reply)
    else:
        assert prompts.parse_category(reply) == parsed


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        ('["a?", " b? "]', ("a?", "b?")),
        ('```json\n["a?", "b?"]\n```', ("a?", "b?")),
        ('["a?"]', "expected 2 questions, got 1"),
        ('["a?", "A?"]', "two questions are the same"),
        ('["a?", ""]', "a question is empty"),
        ('{"q": "a?"}', "expected a JSON list of 2 strings"),
        ("1. a? 2. b?", "expected a JSON list of 2 strings"),
    ],
)
def test_a_questions_reply_is_a_json_list_of_k_distinct_questions(reply, outcome) -> None:
    if isinstance(outcome, tuple):
        assert prompts.parse_questions(reply, 2) == outcome
    else:
        with pytest.raises(prompts.ReplyError, match=re.escape(outcome)):
            prompts.parse_questions(reply, 2)


@pytest.mark.parametrize(
    ("reply", "parsed"),
    [("yes", True), ("No.", False), (" YES\n", True), ("yes, it does", None), ("maybe", None)],
)
def test_a_relevance_reply_is_yes_or_no(reply: str, parsed: bool | None) -> None:
    if parsed is None:
        with pytest.raises(prompts.ReplyError, match="expected yes or no"):
            prompts.parse_relevance(reply)
    else:
        assert prompts.parse_relevance(reply) is parsed


@pytest.mark.parametrize("reply", ["", "  ", "Silent", "WAIT.", "<silent>"])
def test_a_response_is_neither_empty_nor_a_silence_token(reply: str) -> None:
    with pytest.raises(prompts.ReplyError):
        prompts.parse_response(reply)
    assert prompts.parse_response(" It is grey. ") == "It is grey."


# --------------------------------------------------------------------------- stages


async def test_each_stage_sends_its_frames_and_reads_its_reply(tmp_path: Path) -> None:
    """8 s at 0.5 fps, 2 s segments: frames at 0, 2, 4, 6 s, one per segment."""
    video = sampled(tmp_path, seconds=8, fps=0.5, segment_s=2.0)
    model = ScriptedModel(relevant={(2.0, 0), (4.0, 1), (6.0, 0), (6.0, 1)})
    with FakeOpenAIServer(model) as server:
        trajectory = await run_video(server, tmp_path, video, questions=2, max_images=3, seed=7)

    assert [s.index for s in trajectory.segments] == [0, 1, 2, 3]
    assert [(s.start_s, s.end_s) for s in trajectory.segments] == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert [s.times_s for s in trajectory.segments] == [(0.0,), (2.0,), (4.0,), (6.0,)]
    assert trajectory.category == "TA" and trajectory.duration_s == 8.0
    assert [q.text for q in trajectory.questions] == QUESTIONS
    assert trajectory.relevance == ((False, False), (True, False), (False, True), (True, True))

    # Stages 1 and 2: 3 frames spread over the whole video, first and last included.
    for stage in ("category", "questions"):
        (body,) = requests_of(server, stage)
        assert labels(body) == [0.0, 4.0, 6.0]
        assert (body["temperature"], body["seed"], body["model"]) == (0.0, 7, "fake-vl")
        assert all(url.startswith("data:image/jpeg;base64,") for url in images(body))
    assert "of the category TA (Temporal Aggregation)" in prompt_of(
        requests_of(server, "questions")[0]
    )
    # Stage 3: one call per (segment, question), with that segment's frame only.
    relevance = requests_of(server, "relevance")
    assert [labels(body) for body in relevance] == [
        [0.0],
        [0.0],
        [2.0],
        [2.0],
        [4.0],
        [4.0],
        [6.0],
        [6.0],
    ]
    # Stage 4: a response where a question is relevant, from the frames so far.
    responses = requests_of(server, "response")
    assert [labels(body) for body in responses] == [[0.0, 2.0], [0.0, 2.0, 4.0], [0.0, 4.0, 6.0]]
    assert [a.decision for a in trajectory.actions] == ["silent", "respond", "respond", "respond"]
    assert [a.response for a in trajectory.actions[1:3]] == ["q0 at 2s", "q1 at 4s"]

    # calls.jsonl: every call, with its prompt, the JPEGs sent, the raw reply and the parse.
    calls = read_calls(tmp_path)
    assert [c["stage"] for c in calls] == ["category", "questions"] + ["relevance"] * 8 + [
        "response"
    ] * 3
    assert calls[0]["parsed"] == "TA" and calls[0]["reply"] == "TA" and calls[0]["error"] is None
    assert calls[1]["parsed"] == QUESTIONS
    assert [(c["segment"], c["question"], c["parsed"]) for c in calls[2:4]] == [
        (0, 0, False),
        (0, 1, False),
    ]
    assert calls[2]["prompt"] == prompt_of(relevance[0])
    assert calls[2]["images"] == list(trajectory.segments[0].frames)
    assert Path(calls[2]["images"][0]).read_bytes()[:2] == b"\xff\xd8"  # a JPEG on disk
    assert {c["attempt"] for c in calls} == {1} and {c["video"] for c in calls} == {video.video}


async def test_the_last_responding_step_breaks_its_tie_with_the_seeded_draw(tmp_path) -> None:
    """At 6 s both questions are relevant and each was answered once: a seeded draw picks."""
    video = sampled(tmp_path, seconds=8, fps=0.5, segment_s=2.0)
    model = ScriptedModel(relevant={(2.0, 0), (4.0, 1), (6.0, 0), (6.0, 1)})
    with FakeOpenAIServer(model) as server:
        trajectory = await run_video(server, tmp_path, video, questions=2, seed=7)
    draw = tie_breaker(7, video.frames.video_digest).choice([0, 1])
    assert trajectory.actions[3] == Action(
        segment=3, decision="respond", question=draw, response=f"q{draw} at 6s"
    )


async def test_a_malformed_reply_is_retried_with_the_reason(tmp_path: Path) -> None:
    video = sampled(tmp_path, seconds=4, fps=0.5, segment_s=2.0)
    model = ScriptedModel(
        replies={
            "category": [Reply(["It is ", "TA."]), Reply(["TA"])],
            "questions": [Reply(['["only one?"]']), Reply([json.dumps(QUESTIONS)])],
        },
    )
    with FakeOpenAIServer(model) as server:
        trajectory = await run_video(server, tmp_path, video, questions=2)
    assert trajectory.category == "TA" and len(trajectory.questions) == 2
    first, second = requests_of(server, "category")
    assert prompt_of(second) == prompt_of(first) + (
        "\nYour previous reply could not be used (expected one of IV, MD, TA, AM, DED, got "
        '"It is TA."). ' + prompts.CLASSIFY_FORMAT
    )
    assert labels(second) == labels(first) == [0.0, 2.0]
    calls = read_calls(tmp_path)
    assert [(c["stage"], c["attempt"], c["reply"], c["error"]) for c in calls[:4]] == [
        (
            "category",
            1,
            "It is TA.",
            'unparseable reply: expected one of IV, MD, TA, AM, DED, got "It is TA."',
        ),
        ("category", 2, "TA", None),
        ("questions", 1, '["only one?"]', "unparseable reply: expected 2 questions, got 1"),
        ("questions", 2, json.dumps(QUESTIONS), None),
    ]


async def test_server_failures_are_retried_and_a_refusal_is_not(tmp_path: Path) -> None:
    video = sampled(tmp_path, seconds=2, fps=0.5, segment_s=2.0)
    model = ScriptedModel(replies={"category": [Reply(status=503), Reply(["IV"])]})
    with FakeOpenAIServer(model) as server:
        trajectory = await run_video(server, tmp_path, video, questions=2)
    assert trajectory.category == "IV"
    assert read_calls(tmp_path)[0]["error"] == (
        f"HTTP 503 from {server.base_url}/chat/completions: engine overloaded"
    )

    refused = ScriptedModel(replies={"category": [Reply(status=400, error="bad image")]})
    with FakeOpenAIServer(refused) as server, pytest.raises(CallFailed) as failed:
        await run_video(server, tmp_path, video, questions=2, retries=2)
    assert len(server.requests) == 1
    assert str(failed.value) == (
        f"video {video.video}: stage category: the server refused the request: HTTP 400 from "
        f"{server.base_url}/chat/completions: bad image"
    )


async def test_a_failed_call_skips_its_video_with_one_error_line(tmp_path: Path) -> None:
    """The first video's relevance replies never parse; the second video goes through."""
    first, second = tmp_path / "a.mp4", tmp_path / "b.mp4"
    write_video(first, seconds=4)
    write_video(second, seconds=2)
    model = ScriptedModel(relevant={(0.0, 0)})
    first_relevance = 2  # after a's category and questions calls

    def script(body: dict, index: int) -> Reply:
        if first_relevance <= index < first_relevance + 2:
            return Reply(["maybe"])
        return model(body, index)

    errors: list[str] = []
    settings_out = tmp_path / "out"
    with FakeOpenAIServer(script) as server:
        settings = ModelSettings(base_url=server.base_url, model="fake-vl", retries=1)
        options = SynthOptions(questions=2, max_width=64)
        result = await synthesise([first, second], settings, options, settings_out, errors.append)
    assert errors == [
        f"video {first}: stage relevance: no usable reply in 2 attempts, the last: expected "
        'yes or no, got "maybe"'
    ]
    assert [(s.video, s.stage) for s in result.skipped] == [(str(first), "relevance")]
    assert [t.video for t in result.trajectories] == [str(second)]
    calls = read_calls(settings_out)
    failed = [c for c in calls if c["video"] == str(first) and c["error"]]
    assert [(c["stage"], c["segment"], c["question"], c["attempt"]) for c in failed] == [
        ("relevance", 0, 0, 1),
        ("relevance", 0, 0, 2),
    ]
    assert len([c for c in calls if c["video"] == str(first)]) == 4  # nothing after the failure
    lines = (settings_out / "trajectories.jsonl").read_text().splitlines()
    assert [json.loads(line)["video"] for line in lines] == [str(second)]
    manifest = json.loads((settings_out / "synth.json").read_text())
    assert manifest["skipped"] == [{"video": str(first), "stage": "relevance", "error": errors[0]}]


# --------------------------------------------------------------------------- roll-out


def recorder() -> tuple[list[tuple[int, int]], Callable]:
    asked: list[tuple[int, int]] = []

    async def respond(t: int, k: int) -> str:
        asked.append((t, k))
        return f"r{t}.{k}"

    return asked, respond


T, F = True, False


async def test_silent_exactly_where_no_question_is_relevant() -> None:
    matrix = [[F, F], [T, F], [F, F], [F, T], [F, F]]
    asked, respond = recorder()
    actions = await roll_out(matrix, random.Random(0), respond)
    assert [a.decision for a in actions] == ["silent", "respond", "silent", "respond", "silent"]
    assert asked == [(1, 0), (3, 1)]
    assert actions[1] == Action(segment=1, decision="respond", question=0, response="r1.0")
    assert actions[0] == Action(segment=0, decision="silent")


async def test_the_least_answered_relevant_question_is_picked() -> None:
    """Step 0 is a tie (drawn); step 1 must then pick the other; step 2 only question 0 is
    relevant; at step 3 question 0 has two answers and question 1 one: question 1."""
    matrix = [[T, T], [T, T], [T, F], [T, T], [F, F]]
    asked, respond = recorder()
    actions = await roll_out(matrix, random.Random(3), respond)
    drawn = asked[0][1]
    assert asked == [(0, drawn), (1, 1 - drawn), (2, 0), (3, 1)]
    assert actions[4].decision == "silent"


def test_ties_are_drawn_from_the_seeded_generator() -> None:
    picks = {
        seed: pick_question([0, 1, 2], [1, 1, 1], tie_breaker(seed, "v")) for seed in range(20)
    }
    assert set(picks.values()) == {0, 1, 2}  # the draw depends on the seed...
    again = {
        seed: pick_question([0, 1, 2], [1, 1, 1], tie_breaker(seed, "v")) for seed in range(20)
    }
    assert again == picks  # ...and on nothing else
    assert pick_question([0, 1, 2], [2, 0, 1], tie_breaker(0, "v")) == 1  # no tie: no draw


async def test_the_roll_out_is_a_function_of_the_matrix_and_the_replies() -> None:
    matrix = [[T, T, F], [F, T, T], [T, T, T], [F, F, F], [T, F, T]]
    runs = []
    for _ in range(2):
        asked, respond = recorder()
        runs.append((await roll_out(matrix, tie_breaker(5, "digest"), respond), asked))
    assert runs[0] == runs[1]


async def test_no_request_carries_a_frame_after_its_step(tmp_path: Path) -> None:
    """10 s at 1 fps in 2 s segments: frames 2t and 2t+1 in segment t. Every response
    request at step t carries frames of segments 0..t only, the newest one included."""
    video = sampled(tmp_path, seconds=10, fps=1.0, segment_s=2.0)
    relevant = {(2.0, 0), (6.0, 0), (6.0, 1), (8.0, 1)}
    with FakeOpenAIServer(ScriptedModel(relevant=relevant)) as server:
        trajectory = await run_video(server, tmp_path, video, questions=2, max_images=4)
    steps = [a.segment for a in trajectory.actions if a.decision == "respond"]
    assert steps == [1, 3, 4]
    sent = [labels(body) for body in requests_of(server, "response")]
    assert sent == [[0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 5.0, 7.0], [0.0, 3.0, 6.0, 9.0]]
    for t, times in zip(steps, sent, strict=True):
        assert max(times) == 2 * t + 1 < trajectory.segments[t].end_s
    # The relevance calls of a segment carry its two frames and nothing else.
    assert [labels(b) for b in requests_of(server, "relevance")][::2] == [
        [0.0, 1.0],
        [2.0, 3.0],
        [4.0, 5.0],
        [6.0, 7.0],
        [8.0, 9.0],
    ]


def test_a_later_frame_is_refused_in_code(tmp_path: Path) -> None:
    video = sampled(tmp_path, seconds=6, fps=0.5, segment_s=2.0)
    assert [image.t for image in video.up_to(1, 16)] == [0.0, 2.0]
    # Segments that claim to end earlier than their frames: the guard must trip.
    early = tuple(s.model_copy(update={"end_s": s.start_s}) for s in video.segments)
    broken = replace(video, segments=early)
    with pytest.raises(CausalityError, match=r"step 1 \(ends 2s\) would see frames at \[2.0\]s"):
        broken.up_to(1, 16)


def test_spread_keeps_the_first_and_the_newest() -> None:
    assert spread(list(range(10)), 4) == [0, 3, 6, 9]
    assert spread(list(range(3)), 4) == [0, 1, 2]
    assert spread(list(range(5)), 1) == [4]

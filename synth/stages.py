"""Stages 1-4 of `streameval synth` for one video, each a call (or calls) to the served model.

A video's frames are sampled by the Core's frame pipeline (`FrameCache`, `ImageRules`: one
frame every 1/fps seconds, JPEGs on disk) and grouped into fixed-length segments: segment t
covers [t * segment_s, (t + 1) * segment_s), the last one ends with the video. What each
stage shows the model:

1. category: frames spread evenly over the whole video, at most `max_images`;
2. questions: the same frames, and the category;
3. relevance: for each (segment, question) pair, the segment's frames and the question;
4. response (the roll-out, synth/rollout.py): at segment t, frames of segments 0..t only,
   spread evenly from the first to the newest when there are more than `max_images`.
   `SampledVideo.up_to` refuses to hand on a later frame.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from streameval.adapters.chat_prompts import PromptImage
from streameval.core.frames.types import FrameRef, VideoFrames
from streameval.synth import prompts
from streameval.synth.client import Call, ModelClient, Stage
from streameval.synth.models import Category, Segment, SynthQuestion
from streameval.synth.rollout import Respond

T = TypeVar("T")
# Frame times are multiples of 1/fps in binary floating point: k / fps / segment_s can land
# a hair below an integer that it equals.
_TIME_SLACK = 1e-9
# Room for the reply: a code, a JSON list of K questions, a word, a sentence.
MAX_TOKENS = {"category": 8, "questions": 512, "relevance": 8, "response": 128}


class CausalityError(AssertionError):
    """A frame after segment t was about to reach the model at step t: a bug, never input."""


def spread(items: Sequence[T], count: int) -> list[T]:
    """At most `count` items spread evenly from the first to the last, both kept."""
    if len(items) <= count:
        return list(items)
    if count == 1:
        return [items[-1]]
    last = len(items) - 1
    return [items[round(i * last / (count - 1))] for i in range(count)]


@dataclass(frozen=True)
class SampledVideo:
    """A video's sampled frames, grouped into its segments."""

    video: str  # the video's path, as trajectories and records name it
    frames: VideoFrames
    segments: tuple[Segment, ...]
    refs: tuple[tuple[FrameRef, ...], ...]  # refs[t]: the samples of segment t

    @classmethod
    def of(cls, video: str, frames: VideoFrames, segment_s: float) -> SampledVideo:
        """Every sample goes to the segment its time falls in. With segment_s >= 1/fps (the
        command checks it) no segment is empty."""
        groups: dict[int, list[FrameRef]] = {}
        for ref in frames.frames:
            groups.setdefault(math.floor(ref.t / segment_s + _TIME_SLACK), []).append(ref)
        refs = tuple(tuple(groups[t]) for t in sorted(groups))
        assert list(groups) == list(range(len(groups))), "a segment without a frame"
        segments = tuple(
            Segment(
                index=t,
                start_s=t * segment_s,
                end_s=min((t + 1) * segment_s, frames.duration_s),
                frames=tuple(str(frames.path(ref)) for ref in group),
                times_s=tuple(ref.t for ref in group),
            )
            for t, group in enumerate(refs)
        )
        return cls(video, frames, segments, refs)

    def image(self, ref: FrameRef) -> PromptImage:
        # frame_id carries the JPEG's path: calls.jsonl records what was sent by it.
        path = str(self.frames.path(ref))
        return PromptImage(path, ref.t, ref.width, ref.height, self.frames.read(ref))

    def overview(self, max_images: int) -> tuple[PromptImage, ...]:
        """Frames spread over the whole video (stages 1 and 2)."""
        return tuple(self.image(ref) for ref in spread(self.frames.frames, max_images))

    def up_to(self, t: int, max_images: int) -> tuple[PromptImage, ...]:
        """Frames of segments 0..t, never a later one (stage 4 at step t)."""
        seen = [ref for group in self.refs[: t + 1] for ref in group]
        chosen = spread(seen, max_images)
        end_s = self.segments[t].end_s
        late = [ref.t for ref in chosen if ref.t >= end_s - _TIME_SLACK]
        if late:
            raise CausalityError(f"step {t} (ends {end_s:g}s) would see frames at {late}s")
        return tuple(self.image(ref) for ref in chosen)


@dataclass(frozen=True)
class Stages:
    """The model calls of stages 1-4 for one video."""

    client: ModelClient
    video: SampledVideo
    max_images: int

    async def category(self) -> Category:
        images = self.video.overview(self.max_images)
        prompt = prompts.classify_prompt(len(images), self.video.frames.duration_s)
        call = self._call("category", images, prompt, prompts.CLASSIFY_FORMAT)
        return await self.client.ask(call, prompts.parse_category)

    async def questions(self, category: Category, k: int) -> tuple[SynthQuestion, ...]:
        images = self.video.overview(self.max_images)
        duration_s = self.video.frames.duration_s
        prompt = prompts.questions_prompt(category, k, len(images), duration_s)
        call = self._call("questions", images, prompt, prompts.QUESTIONS_FORMAT.format(k=k))
        texts = await self.client.ask(call, lambda reply: prompts.parse_questions(reply, k))
        return tuple(SynthQuestion(index=i, text=text) for i, text in enumerate(texts))

    async def relevance(
        self, category: Category, questions: Sequence[SynthQuestion]
    ) -> tuple[tuple[bool, ...], ...]:
        """The matrix [t][k]: one yes/no call per (segment, question) pair."""
        matrix = []
        for segment, refs in zip(self.video.segments, self.video.refs, strict=True):
            images = tuple(self.video.image(ref) for ref in refs)
            row = []
            for question in questions:
                prompt = prompts.relevance_prompt(
                    category, question.text, segment.start_s, segment.end_s
                )
                call = self._call(
                    "relevance",
                    images,
                    prompt,
                    prompts.RELEVANCE_FORMAT,
                    segment=segment.index,
                    question=question.index,
                )
                row.append(await self.client.ask(call, prompts.parse_relevance))
            matrix.append(tuple(row))
        return tuple(matrix)

    def responder(self, category: Category, questions: Sequence[SynthQuestion]) -> Respond:
        """Stage 4's `respond(t, k)` for the roll-out."""

        async def respond(t: int, k: int) -> str:
            images = self.video.up_to(t, self.max_images)
            prompt = prompts.response_prompt(category, questions[k].text, images[-1].t)
            call = self._call(
                "response", images, prompt, prompts.RESPONSE_FORMAT, segment=t, question=k
            )
            return await self.client.ask(call, prompts.parse_response)

        return respond

    def _call(
        self,
        stage: Stage,
        images: tuple[PromptImage, ...],
        prompt: str,
        reply_format: str,
        *,
        segment: int | None = None,
        question: int | None = None,
    ) -> Call:
        return Call(
            stage=stage,
            video=self.video.video,
            images=images,
            prompt=prompt,
            reply_format=reply_format,
            max_tokens=MAX_TOKENS[stage],
            segment=segment,
            question=question,
        )

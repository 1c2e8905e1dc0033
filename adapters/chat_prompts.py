"""What a non-native streaming adapter says to a chat VideoLLM, and how it reads the reply.

The wording follows the TRACE protocol: a multiple-choice question over the legal history
window, answered with an option letter; and for proactive tasks a monitoring instruction
over a sliding window, where the model either responds now or says a wait word (WAIT), which
the adapter turns into an explicit silent decision. Every template can be replaced in the
adapter's config; placeholders are checked when the config is loaded.
"""

from __future__ import annotations

import base64
import io
import math
import string
import wave
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streameval.protocol import AUDIO_SAMPLE_BYTES, pcm_seconds

QA_PROMPT = (
    "The images above are frames of a live video stream in time order; the last one is what "
    "is on screen now, {t:g} seconds into the video. Use only what these frames show.\n"
    "Question: {question}\n"
    "Options:\n{options}\n"
    "Reply with the letter of the correct option and nothing else."
)
OPEN_QA_PROMPT = (
    "The images above are frames of a live video stream in time order; the last one is what "
    "is on screen now, {t:g} seconds into the video. Use only what these frames show.\n"
    "Question: {question}\n"
    "Reply with a short answer."
)
PROACTIVE_PROMPT = (
    "The images above are the latest frames of a live video stream in time order; the last "
    "one is what is on screen now, {t:g} seconds into the video.\n"
    "You are watching the stream with this instruction: {instruction}\n"
    "{earlier}"
    "If the instruction calls for a response at this moment, give it in one short sentence. "
    "Otherwise reply with exactly {wait} and nothing else."
)
EARLIER_LINE = "Your earlier responses: {responses}.\n"
FRAME_LABEL = "Frame at {t:g}s:"

# Audio input: the window's sound goes as clips between the frames, each after this label,
# and the prompts say so (images mode; adapters/video_chat.py refuses audio in video mode).
AUDIO_LABEL = "Audio from {start:g}s to {end:g}s:"
AUDIO_QA_PROMPT = (
    "The images above are frames of a live video stream in time order, with its sound in "
    "the audio clips between them; the last frame is what is on screen now, {t:g} seconds "
    "into the video. Use only what these frames and clips show.\n"
    "Question: {question}\n"
    "Options:\n{options}\n"
    "Reply with the letter of the correct option and nothing else."
)
AUDIO_OPEN_QA_PROMPT = (
    "The images above are frames of a live video stream in time order, with its sound in "
    "the audio clips between them; the last frame is what is on screen now, {t:g} seconds "
    "into the video. Use only what these frames and clips show.\n"
    "Question: {question}\n"
    "Reply with a short answer."
)
AUDIO_PROACTIVE_PROMPT = (
    "The images above are the latest frames of a live video stream in time order, with its "
    "sound in the audio clips between them; the last frame is what is on screen now, {t:g} "
    "seconds into the video.\n"
    "You are watching the stream with this instruction: {instruction}\n"
    "{earlier}"
    "If the instruction calls for a response at this moment, give it in one short sentence. "
    "Otherwise reply with exactly {wait} and nothing else."
)

# Video input mode: the window goes as one video after this label, and the prompts say so.
VIDEO_LABEL = "Video from {start:g}s to {end:g}s:"
VIDEO_QA_PROMPT = (
    "The video above is the latest part of a live video stream; its last frame is what is on "
    "screen now, {t:g} seconds into the video. Use only what this video shows.\n"
    "Question: {question}\n"
    "Options:\n{options}\n"
    "Reply with the letter of the correct option and nothing else."
)
VIDEO_OPEN_QA_PROMPT = (
    "The video above is the latest part of a live video stream; its last frame is what is on "
    "screen now, {t:g} seconds into the video. Use only what this video shows.\n"
    "Question: {question}\n"
    "Reply with a short answer."
)
VIDEO_PROACTIVE_PROMPT = (
    "The video above is the latest part of a live video stream; its last frame is what is on "
    "screen now, {t:g} seconds into the video.\n"
    "You are watching the stream with this instruction: {instruction}\n"
    "{earlier}"
    "If the instruction calls for a response at this moment, give it in one short sentence. "
    "Otherwise reply with exactly {wait} and nothing else."
)

PLACEHOLDERS = {
    "qa_prompt": {"t", "question", "options"},
    "open_qa_prompt": {"t", "question"},
    "proactive_prompt": {"t", "instruction", "earlier", "wait"},
    "frame_label": {"t", "index"},
    "video_label": {"start", "end", "frames", "fps"},
    "audio_label": {"start", "end"},
}
_SAMPLE = {
    "t": 1.0,
    "question": "q",
    "options": "A. a",
    "instruction": "i",
    "earlier": "",
    "start": 0.0,
    "end": 1.0,
    "frames": 2,
    "fps": 1.0,
}


def check_stop_words(words: list[str]) -> list[str]:
    """Refuse an empty stop text: every reply would end before it began."""
    if any(not word for word in words):
        raise ValueError("a stop word must not be empty")
    return words


def check_template(option: str, template: str) -> str:
    """Refuse placeholders the adapter will not fill, before any session starts."""
    allowed = PLACEHOLDERS[option]
    names = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    unknown = sorted(names - allowed)
    if unknown:
        raise ValueError(
            f"unknown placeholder {{{unknown[0]}}}; {option} may use "
            + ", ".join(f"{{{name}}}" for name in sorted(allowed))
        )
    try:
        template.format(**{**_SAMPLE, "wait": "WAIT", "index": 0})
    except (ValueError, IndexError) as exc:
        raise ValueError(f"not a valid template: {exc}") from None
    return template


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True)
class PromptImage:
    """One frame as the model receives it (possibly downscaled), with its identity."""

    frame_id: str
    t: float
    width: int
    height: int
    jpeg: bytes

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def data_url(self) -> str:
        return "data:image/jpeg;base64," + base64.b64encode(self.jpeg).decode("ascii")


def prepare_image(
    frame_id: str, t: float, width: int, height: int, jpeg: bytes, max_pixels: int | None
) -> PromptImage:
    """Downscale (aspect kept, never up) to at most `max_pixels`, re-encoding JPEG q90."""
    if max_pixels is None or width * height <= max_pixels:
        return PromptImage(frame_id, t, width, height, jpeg)
    from PIL import Image

    scale = math.sqrt(max_pixels / (width * height))
    size = (max(1, int(width * scale)), max(1, int(height * scale)))
    with Image.open(io.BytesIO(jpeg)) as image:
        smaller = image.convert("RGB").resize(size, Image.Resampling.BICUBIC)
    out = io.BytesIO()
    smaller.save(out, format="JPEG", quality=90)
    return PromptImage(frame_id, t, size[0], size[1], out.getvalue())


@dataclass(frozen=True)
class PromptAudio:
    """A span of the stream's sound as the model receives it: int16 mono PCM (little-endian)
    covering video time [start_t, t). One Core chunk when received; `merge_audio` joins
    contiguous ones."""

    start_t: float
    t: float
    sample_rate: int
    pcm: bytes

    @property
    def duration_s(self) -> float:
        return pcm_seconds(self.pcm, self.sample_rate)

    def wav(self) -> bytes:
        """The span as a WAV file (RIFF, 16-bit mono at its sample rate): the format every
        OpenAI-compatible server decodes."""
        out = io.BytesIO()
        with wave.open(out, "wb") as writer:
            writer.setnchannels(1)
            writer.setsampwidth(AUDIO_SAMPLE_BYTES)
            writer.setframerate(self.sample_rate)
            writer.writeframes(self.pcm)
        return out.getvalue()


# Chunk times are multiples of the run's chunk length, so contiguous ones meet exactly; the
# tolerance only absorbs binary rounding.
_CONTIGUOUS_S = 1e-6


def merge_audio(
    clips: Sequence[PromptAudio], frame_times: Sequence[float]
) -> tuple[PromptAudio, ...]:
    """Contiguous `clips` (in time order) joined into one span per stretch between frames.

    A clip goes after the frames its end has reached (a frame at f comes before a clip
    ending after f), so a span never crosses a frame time: two clips meeting at e stay apart
    when a frame lies in [e, next clip's end). A gap or a change of sample rate also splits."""
    spans: list[PromptAudio] = []
    for clip in clips:
        last = spans[-1] if spans else None
        if (
            last is not None
            and abs(clip.start_t - last.t) <= _CONTIGUOUS_S
            and clip.sample_rate == last.sample_rate
            and not any(last.t <= f < clip.t for f in frame_times)
        ):
            spans[-1] = PromptAudio(last.start_t, clip.t, clip.sample_rate, last.pcm + clip.pcm)
        else:
            spans.append(clip)
    return tuple(spans)


@dataclass(frozen=True)
class VideoInput:
    """How a request's frames travel when they go as one video rather than as images.

    `fps` is the rate the frames are declared to have (the server derives the frames'
    times from it: Qwen2.5-VL's temporal positions, Qwen3-VL's timestamps); `label` is the
    text placed before the video (None: no label)."""

    fps: float
    label: str | None = None


def video_fps(images: Sequence[PromptImage], fallback_fps: float) -> float:
    """The rate a window's frames are declared to have: (n - 1) over the time from its first
    frame to its last (the Core's sampling rate for consecutive frames; the mean rate for
    frames spread over a longer span); `fallback_fps` (the session's fps) for a window of
    one frame, or of frames that share one time. Rounded to 6 decimals."""
    if len(images) >= 2:
        span = images[-1].t - images[0].t
        if span > 0:
            return round((len(images) - 1) / span, 6)
    return round(fallback_fps, 6)


def video_label(template: str | None, images: Sequence[PromptImage], fps: float) -> str | None:
    if template is None or not images:
        return None
    return template.format(start=images[0].t, end=images[-1].t, frames=len(images), fps=fps)


def video_data_url(images: Sequence[PromptImage]) -> str:
    """vLLM's frames-as-video data URL: `data:video/jpeg;base64,` then each frame's JPEG in
    base64, comma-separated, in time order (vllm/multimodal/media/video.py,
    VideoMediaIO.load_base64 splits the data on commas and decodes each part as a JPEG)."""
    frames = ",".join(base64.b64encode(image.jpeg).decode("ascii") for image in images)
    return "data:video/jpeg;base64," + frames


@dataclass(frozen=True)
class ChatRequest:
    """One model call, independent of the backend that serves it.

    `images` are the submitted frames in time order. With `video` None (input mode
    "images") each goes as its own image after its `frame_label`. With `video` set (input
    mode "video") they go together as ONE video after `video.label`, declared at
    `video.fps`; `frame_label` is then unused. Either way every frame counts as one
    submitted image in the workload record."""

    images: tuple[PromptImage, ...]
    prompt: str
    max_tokens: int
    system: str | None = None
    frame_label: str | None = FRAME_LABEL
    video: VideoInput | None = None
    # The window's sound (images mode), in time order, each span after `audio_label`.
    audio: tuple[PromptAudio, ...] = ()
    audio_label: str | None = AUDIO_LABEL

    def labels(self) -> list[str | None]:
        if self.frame_label is None:
            return [None] * len(self.images)
        return [self.frame_label.format(t=image.t, index=i) for i, image in enumerate(self.images)]

    def items(self) -> list[tuple[str | None, PromptImage | PromptAudio]]:
        """The images and sound spans in the order the model receives them, each with the
        text before it: a span comes before the first frame at or after its end."""
        ordered: list[tuple[str | None, PromptImage | PromptAudio]] = []
        spans = list(self.audio)
        for label, image in zip(self.labels(), self.images, strict=True):
            while spans and spans[0].t <= image.t + _CONTIGUOUS_S:
                ordered.append(self._audio_item(spans.pop(0)))
            ordered.append((label, image))
        ordered.extend(self._audio_item(span) for span in spans)
        return ordered

    def _audio_item(self, span: PromptAudio) -> tuple[str | None, PromptAudio]:
        if self.audio_label is None:
            return None, span
        return self.audio_label.format(start=span.start_t, end=span.t), span

    @property
    def audio_seconds(self) -> float:
        return sum(span.duration_s for span in self.audio)


def openai_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """OpenAI chat format: one user turn, each image after its label, then the prompt; a
    request with sound puts each span, after its label, in its place among the images
    (`ChatRequest.items`) as an `input_audio` part holding a base64 WAV.

    Video mode: the video's label, one `video_url` part holding all frames (see
    `video_data_url`), then the prompt."""
    content: list[dict[str, Any]] = []
    if request.video is not None:
        if request.video.label is not None:
            content.append({"type": "text", "text": request.video.label})
        content.append({"type": "video_url", "video_url": {"url": video_data_url(request.images)}})
        content.append({"type": "text", "text": request.prompt})
        return _with_system(request, content)
    for label, item in request.items():
        if label is not None:
            content.append({"type": "text", "text": label})
        content.append(_openai_part(item))
    content.append({"type": "text", "text": request.prompt})
    return _with_system(request, content)


def _openai_part(item: PromptImage | PromptAudio) -> dict[str, Any]:
    if isinstance(item, PromptImage):
        return {"type": "image_url", "image_url": {"url": item.data_url}}
    data = base64.b64encode(item.wav()).decode("ascii")
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def hf_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The same turn for a Hugging Face chat template (images as `{"type": "image"}`; in video
    mode the label and one `{"type": "video"}` whose frames are `request.images`)."""
    content: list[dict[str, Any]] = []
    if request.video is not None:
        if request.video.label is not None:
            content.append({"type": "text", "text": request.video.label})
        content.append({"type": "video"})
        content.append({"type": "text", "text": request.prompt})
        return _with_system(request, content)
    for label, _ in zip(request.labels(), request.images, strict=True):
        if label is not None:
            content.append({"type": "text", "text": label})
        content.append({"type": "image"})
    content.append({"type": "text", "text": request.prompt})
    return _with_system(request, content)


def shared_images(previous: ChatRequest | None, request: ChatRequest) -> int:
    """The images at the head of `request`'s prompt that `previous` (the session's last call;
    None: there was none) had at the head of its own: what a prefix cache could reuse.

    The messages put the system prompt first, then each image (and sound span) after its
    label, then the prompt (`openai_messages`, `hf_messages`), so an image is shared when
    the system prompt and every label, image and span up to and including it are the same in
    both. A video is one part: all its images are shared, or none."""
    if previous is None or previous.system != request.system:
        return 0
    if request.video is not None or previous.video is not None:
        same = previous.video == request.video and previous.images == request.images
        return len(request.images) if same else 0
    shared = 0
    for (label_before, before), (label, item) in zip(
        previous.items(), request.items(), strict=False
    ):
        if label != label_before or _identity(item) != _identity(before):
            break
        shared += isinstance(item, PromptImage)
    return shared


def _identity(item: PromptImage | PromptAudio) -> object:
    return item.frame_id if isinstance(item, PromptImage) else item


def _with_system(request: ChatRequest, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages = [{"role": "user", "content": content}]
    if request.system:
        messages.insert(0, {"role": "system", "content": request.system})
    return messages


def qa_prompt(
    template: str, open_template: str, t: float, question: str, options: Sequence[str]
) -> str:
    if options:
        return template.format(t=t, question=question, options="\n".join(options))
    return open_template.format(t=t, question=question)


def proactive_prompt(
    template: str, t: float, instruction: str, earlier: Sequence[tuple[float, str]], wait: str
) -> str:
    said = "; ".join(f'"{text}" at {when:g}s' for when, text in earlier)
    return template.format(
        t=t,
        instruction=instruction,
        earlier=EARLIER_LINE.format(responses=said) if earlier else "",
        wait=wait,
    )


# --------------------------------------------------------------------------- replies

_DECORATION = " \t\r\n\"'`*"  # whitespace, quotes, markdown emphasis around the word
_AFTER_WAIT = set(_DECORATION + ".!")


def is_silence(text: str, wait: str) -> bool:
    """An empty reply or the wait word (punctuation and case aside) means "nothing now"."""
    stripped = text.strip("".join(_AFTER_WAIT))
    return not stripped or stripped.upper() == wait.upper()


def may_still_be_wait(text: str, wait: str) -> bool:
    """True while the reply so far could still turn out to be the wait word.

    A proactive reply is held back only this long, so a real response starts (and its first
    token is timed) as soon as it can no longer be WAIT.
    """
    head = text.lstrip(_DECORATION).upper()
    word = wait.upper()
    if len(head) <= len(word):
        return word.startswith(head)
    return head.startswith(word) and set(head[len(word) :]) <= _AFTER_WAIT

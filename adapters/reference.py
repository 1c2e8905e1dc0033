"""The reference adapter: answers the synthetic benchmark from pixels, and the sound tasks
of `synthetic-av` from the audio chunks it is streamed, with no model weights.

It never sees ground truth; it keeps a small per-session summary of what it has seen
(`ReferencePolicy`) and stays silent until the evidence is on screen. It shows what a
well-behaved adapter looks like on the wire: workload records for every frame it analyses
and every audio chunk it hears, an explicit decision at every step.
"""

from __future__ import annotations

import time

from pydantic import Field

from streameval.adapters.config import AdapterConfig
from streameval.adapters.reference_policy import WORK_WIDTH, ReferencePolicy
from streameval.adapters.sdk import Adapter, AudioChunk, Frame, Responder, Session
from streameval.adapters.settings import RECORDED_IF_CHANGED
from streameval.protocol import AdapterConditions, Instruction, Question, Step


class ReferenceConfig(AdapterConfig):
    """The reference policy's one option: how finely it looks, its visual budget. Like a
    VideoLLM's visual tokens per frame it trades cost for what can be read, which lets the
    demo show, without a GPU, how an input setting moves the scores."""

    work_width: int = Field(
        WORK_WIDTH,
        ge=8,
        le=4096,
        description="width in pixels each frame is analysed at; narrower is faster and "
        "misses small shapes and digits",
    )
    audio: bool = Field(
        True,
        description="hear the sound (declared in the hello); off, the adapter is video-only "
        "and guesses the first option of a question about sound",
        # Hearing changes nothing on a run without sound, the reference's runs before it.
        json_schema_extra=RECORDED_IF_CHANGED,
    )


class ReferenceAdapter(Adapter):
    name = "reference"
    version = "1"
    Config = ReferenceConfig
    conditions = AdapterConditions(
        state="native",
        initiation="polled",
        boundary="model+adapter",
        deployment="in-process",
        model_name="reference-pixel-policy",
        model_version="1",
        history="per-frame summaries of every delivered frame",
    )

    # The default options, also for a subclass whose own __init__ takes other ones.
    config: ReferenceConfig = ReferenceConfig()

    def __init__(self, config: ReferenceConfig | None = None) -> None:
        if config is not None:
            self.config = config
        self.consumes_audio = self.config.audio

    async def on_session_start(self, session: Session) -> None:
        session.state["policy"] = ReferencePolicy(self.config.work_width)

    async def on_frame(self, session: Session, frame: Frame) -> None:
        started = time.monotonic_ns()
        rgb = frame.rgb()
        session.state["policy"].observe(frame.t, rgb)
        # Each frame is analysed once and folded into the state: one model call, one image.
        await session.workload(
            kind="model_call",
            frame_ids=[frame.frame_id],
            images=1,
            pixels=int(rgb.shape[0] * rgb.shape[1]),
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )

    async def on_audio(self, session: Session, chunk: AudioChunk) -> None:
        started = time.monotonic_ns()
        session.state["policy"].hear(chunk.start_t, chunk.sample_rate, chunk.samples())
        # Each chunk is taken in once: one model call, no image, its seconds of sound.
        await session.workload(
            kind="model_call",
            images=0,
            audio_seconds=chunk.duration_s,
            started_ns=started,
            ended_ns=time.monotonic_ns(),
        )

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await respond.say(session.state["policy"].answer(question.text, question.options), 1)

    async def on_instruction(self, session: Session, instruction: Instruction, respond: Responder):
        session.state["policy"].instruct(instruction.text)

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        utterance = session.state["policy"].decide()
        if utterance is None:
            await respond.silent(step.step)
        else:
            await respond.say(utterance, output_tokens=len(utterance.split()))

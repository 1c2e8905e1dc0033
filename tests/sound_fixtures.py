"""Videos with sound for the Core's audio tests: real H.264 + AAC files written with PyAV,
a tone at exact times, and the adapters that listen to them (served as real WebSocket
services: `python -m streameval.adapters tests.sound_fixtures:ListeningAdapter --port 0`).
None of this ships."""

from __future__ import annotations

import hashlib
from pathlib import Path

import av
import numpy as np

from streameval.adapters.sdk import Adapter, AudioChunk, Frame, Responder, Session
from streameval.protocol import AdapterConditions, Question

SOURCE_RATE = 48_000
TONE_HZ = 440.0


def write_sound_video(
    path: Path, seconds: int = 4, tone: tuple[float, float] | None = (1.0, 2.0), fps: int = 10
) -> None:
    """A 64x48 H.264 video of `seconds`, with an AAC mono track at 48 kHz: silence, and a
    440 Hz tone over `tone` (start, end) seconds; `tone=None` writes no audio stream."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = container.add_stream("aac", rate=SOURCE_RATE, layout="mono") if tone else None
        for n in range(seconds * fps):
            image = np.full((48, 64, 3), (n * 7) % 256, dtype=np.uint8)
            container.mux(video.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(video.encode())
        if audio is not None:
            _write_tone(container, audio, seconds, tone)


def _write_tone(container, audio, seconds: int, tone: tuple[float, float]) -> None:
    t = np.arange(seconds * SOURCE_RATE) / SOURCE_RATE
    on = (t >= tone[0]) & (t < tone[1])
    samples = np.where(on, 0.5 * np.sin(2 * np.pi * TONE_HZ * t) * 32767, 0).astype(np.int16)
    size = audio.codec_context.frame_size or 1024
    for first in range(0, samples.size, size):
        block = samples[first : first + size].reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(block, format="s16", layout="mono")
        frame.sample_rate, frame.pts = SOURCE_RATE, first
        container.mux(audio.encode(frame))
    container.mux(audio.encode())


_POLLED = AdapterConditions(state="native", initiation="polled", model_name="listener")


class ListeningAdapter(Adapter):
    """Takes the sound and answers every question with what it heard: the number of chunks,
    the sha256 of their PCM in arrival order, and whether each chunk arrived in order with
    the frames (its end at or before the next frame's time)."""

    name = "listening"
    conditions = _POLLED
    consumes_audio = True

    async def on_session_start(self, session: Session) -> None:
        session.state.update(chunks=0, sha=hashlib.sha256(), late=0, pending=[])

    async def on_audio(self, session: Session, chunk: AudioChunk) -> None:
        state = session.state
        state["chunks"] += 1
        state["sha"].update(chunk.pcm)
        state["pending"].append(chunk.t)
        await session.workload(
            "state_commit",
            audio_seconds=chunk.duration_s,
            audio_tokens=round(chunk.duration_s * 25),
        )

    async def on_frame(self, session: Session, frame: Frame) -> None:
        # A chunk that ends after the frame it precedes came from the future.
        state = session.state
        state["late"] += sum(1 for end in state["pending"] if end > frame.t + 1e-9)
        state["pending"] = []

    async def on_question(self, session: Session, question: Question, respond: Responder):
        state = session.state
        state["late"] += sum(1 for end in state["pending"] if end > question.t + 1e-9)
        await respond.say(
            f"chunks={state['chunks']} sha={state['sha'].hexdigest()} late={state['late']}"
        )


class DeafAdapter(ListeningAdapter):
    """The same adapter without ears: its hello declares no audio."""

    name = "deaf"
    consumes_audio = False

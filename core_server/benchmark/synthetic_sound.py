"""The synthetic benchmark's sound: sine tones at known times over a faint noise floor.

A soundtrack is described (which tone starts at which frame, for how long, at which pitch)
and rendered to 16 kHz mono 16-bit PCM, the rate and format the Core streams, so decoding
and resampling it gives back the rendered samples exactly. Tones start and end on the
video's frame grid, so every onset is a known frame number.

The vocabulary (the sample rate, the beep's pitch, the four named pitches, how loud a tone
is) is public, as the synthetic benchmark's palette is: a program that listens to these
videos may know it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16_000
BEEP_HZ = 1000
# The pitches of the pitch-order task, an octave apart so no two are ever confused.
PITCHES_HZ = (400, 800, 1600, 3200)
TONE_AMPLITUDE = 8192  # a quarter of full scale
NOISE_RMS = 30.0  # ~ -60 dBFS: a quiet room, far below any tone
FADE_SAMPLES = 80  # 5 ms raised-cosine edges, so a tone starts without a click


def pitch_text(hz: int) -> str:
    """How options name a pitch: "800 Hz"."""
    return f"{hz} Hz"


@dataclass(frozen=True)
class Tone:
    onset: int  # first video frame of the tone
    frames: int  # its length in video frames
    hz: int


@dataclass(frozen=True)
class Soundtrack:
    tones: tuple[Tone, ...]
    noise_seed: int


def _tone(tone: Tone, samples_per_frame: int) -> np.ndarray:
    n = tone.frames * samples_per_frame
    wave = np.sin(2 * np.pi * tone.hz * np.arange(n) / SAMPLE_RATE)
    edge = 0.5 - 0.5 * np.cos(np.pi * np.arange(FADE_SAMPLES) / FADE_SAMPLES)
    envelope = np.ones(n)
    envelope[:FADE_SAMPLES], envelope[n - FADE_SAMPLES :] = edge, edge[::-1]
    return TONE_AMPLITUDE * envelope * wave


def render_pcm(soundtrack: Soundtrack, frames: int, fps: int) -> np.ndarray:
    """The soundtrack of a video `frames` long at `fps`: int16 samples at SAMPLE_RATE, the
    same for the same soundtrack (its noise is seeded)."""
    per_frame = SAMPLE_RATE // fps
    rng = np.random.default_rng(soundtrack.noise_seed)
    signal = rng.normal(0.0, NOISE_RMS, frames * per_frame)
    for tone in soundtrack.tones:
        start = tone.onset * per_frame
        signal[start : start + tone.frames * per_frame] += _tone(tone, per_frame)
    return np.clip(np.rint(signal), -32768, 32767).astype(np.int16)

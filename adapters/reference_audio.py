"""What the reference adapter hears: where tones start and at which pitch, from the PCM it
is streamed, with numpy alone.

A tone is a run of loud 10 ms windows (RMS far above the synthetic videos' noise floor and
far below their tones: synthetic_sound.py); runs less than 50 ms apart are one tone. Its
onset is the first sample of the run (or of the window before it) louder than a level the
noise never reaches, which places it within about a millisecond of the written onset; its
pitch is the peak of the Hann-windowed spectrum of the rest of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINDOW_S = 0.01
LOUD_RMS = 1000.0
ONSET_LEVEL = 300
QUIET_WINDOWS = 5  # this many quiet windows end a tone


@dataclass(frozen=True, slots=True)
class HeardTone:
    onset_s: float
    hz: float


def find_tones(pcm: np.ndarray, sample_rate: int, origin_s: float = 0.0) -> list[HeardTone]:
    """The tones of mono PCM whose first sample sits at `origin_s`, in order. A window not
    yet complete at the end is left for the next call, with more samples."""
    window = max(1, round(sample_rate * WINDOW_S))
    count = len(pcm) // window
    signal = pcm[: count * window].astype(np.float64)
    rms = np.sqrt((signal.reshape(count, window) ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > LOUD_RMS)
    if len(loud) == 0:
        return []
    breaks = np.flatnonzero(np.diff(loud) > QUIET_WINDOWS)
    firsts, lasts = loud[np.r_[0, breaks + 1]], loud[np.r_[breaks, len(loud) - 1]]
    tones = []
    for first, last in zip(firsts.tolist(), lasts.tolist(), strict=True):
        lead = max(0, first - 1) * window
        end = (last + 1) * window
        onset = lead + int(np.argmax(np.abs(signal[lead:end]) > ONSET_LEVEL))
        tones.append(
            HeardTone(origin_s + onset / sample_rate, _pitch(signal[onset:end], sample_rate))
        )
    return tones


def _pitch(body: np.ndarray, sample_rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(body * np.hanning(len(body))))
    return float(np.argmax(spectrum) * sample_rate / len(body))


class Hearing:
    """The sound of one session so far: chunks laid end to end on the stream's clock (a gap
    between two is silence), analysed again whenever a tone is asked for after new sound."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._samples = 0
        self._origin_s = 0.0
        self._sample_rate = 0
        self._tones: list[HeardTone] | None = []

    @property
    def heard(self) -> bool:
        return self._samples > 0

    def hear(self, start_s: float, sample_rate: int, samples: np.ndarray) -> None:
        if not self.heard:
            self._origin_s, self._sample_rate = start_s, sample_rate
        gap = round((start_s - self._origin_s) * self._sample_rate) - self._samples
        if gap > 0:
            self._parts.append(np.zeros(gap, np.int16))
        self._parts.append(samples)
        self._samples += max(0, gap) + len(samples)
        self._tones = None

    def tones(self) -> list[HeardTone]:
        if self._tones is None:
            pcm = np.concatenate(self._parts)
            self._parts = [pcm]
            self._tones = find_tones(pcm, self._sample_rate, self._origin_s)
        return self._tones

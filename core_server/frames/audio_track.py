"""A video's sound as the Core streams it: decoded once with PyAV, resampled to 16-bit mono
PCM at the run's sample rate and cached next to the video's frames under its content
digest, so every session of every run reads the same samples.

Time 0 is the first frame of the video stream (docs/protocol.md, "What a frame shows"): the
audio's own start is placed against it, sound before it is dropped and a later start is
preceded by silence. A video without an audio stream has no sound: its chunks are zeros,
marked silent.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from streameval.core.frames.build_lock import entry_build_lock
from streameval.core.frames.errors import VideoDecodeError, cache_io
from streameval.core.frames.probing import open_video, video_stream
from streameval.protocol import AUDIO_SAMPLE_BYTES

# Bumped when the cached form or the decoding rule changes: older entries are rebuilt.
AUDIO_FORMAT = 1


@dataclass(frozen=True)
class AudioTrack:
    """A video's sound: little-endian int16 mono samples from the video's time 0.
    `has_sound` False: the video has no audio stream (the samples are none). Read from the
    cache, `pcm` maps the file: an hour of sound is 110 MiB, which sessions of one video
    share through the page cache instead of each holding a copy."""

    sample_rate: int
    pcm: bytes | mmap.mmap
    has_sound: bool

    @property
    def samples(self) -> int:
        return len(self.pcm) // AUDIO_SAMPLE_BYTES

    def chunk(self, index: int, chunk_s: float) -> tuple[bytes, bool]:
        """Chunk `index`'s PCM, covering [index * chunk_s, (index + 1) * chunk_s): the
        track's samples there, zeros past its end; and whether it is silence standing in
        for a video without sound."""
        first = chunk_start_sample(index, chunk_s, self.sample_rate)
        end = chunk_start_sample(index + 1, chunk_s, self.sample_rate)
        data = self.pcm[first * AUDIO_SAMPLE_BYTES : end * AUDIO_SAMPLE_BYTES]
        missing = (end - first) * AUDIO_SAMPLE_BYTES - len(data)
        return data + bytes(missing), not self.has_sound


def chunk_start_sample(index: int, chunk_s: float, sample_rate: int) -> int:
    """The first sample of chunk `index`: rounded once from its start time, so consecutive
    chunks tile the track with no sample lost or repeated."""
    return round(index * chunk_s * sample_rate)


def audio_track(root: Path, video_path: Path, digest: str, sample_rate: int) -> AudioTrack:
    """The video's sound at `sample_rate`, decoded at most once per content digest: from
    the cache under `root` (the frame cache's folder), built there when missing. One
    process builds an entry at a time; the others wait for it and read it."""
    final = root / digest[:2] / f"{digest}-audio-{sample_rate}hz"
    track = _load(final, sample_rate)
    if track is not None:
        return track
    with entry_build_lock(final, wait=True):
        track = _load(final, sample_rate)
        if track is None:
            track = decode_audio(video_path, sample_rate)
            _save(final, track)
    return track


def _load(final: Path, sample_rate: int) -> AudioTrack | None:
    try:
        meta = json.loads((final / "audio.json").read_text())
        if meta.get("format") != AUDIO_FORMAT or meta.get("sample_rate") != sample_rate:
            return None
        pcm = _mapped(final / "audio.pcm")
    except (OSError, ValueError):
        return None
    if len(pcm) != meta.get("samples", -1) * AUDIO_SAMPLE_BYTES:
        return None  # half-written or damaged: built again
    return AudioTrack(sample_rate, pcm, bool(meta.get("has_sound")))


def _mapped(path: Path) -> bytes | mmap.mmap:
    with path.open("rb") as file:
        if os.fstat(file.fileno()).st_size == 0:
            return b""  # an empty file cannot be mapped
        return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)


def _save(final: Path, track: AudioTrack) -> None:
    """Samples first, the index last (atomically): an entry with an index is whole."""
    meta = {
        "format": AUDIO_FORMAT,
        "sample_rate": track.sample_rate,
        "samples": track.samples,
        "has_sound": track.has_sound,
    }
    with cache_io(final, "write the audio of"):
        final.mkdir(parents=True, exist_ok=True)
        (final / "audio.pcm").write_bytes(track.pcm)
        partial = final / "audio.json.partial"
        partial.write_text(json.dumps(meta))
        os.replace(partial, final / "audio.json")


def has_sound(video_path: Path) -> bool:
    """Whether the video has an audio stream (its metadata only; nothing is decoded)."""
    with open_video(video_path) as container:
        return bool(container.streams.audio)


def decode_audio(video_path: Path, sample_rate: int) -> AudioTrack:
    """Decode the video's first audio stream to int16 mono at `sample_rate`, placed on the
    video stream's clock. VideoDecodeError (one line) for a sound track that cannot be
    decoded."""
    with open_video(video_path) as container:
        video_start = _stream_start(video_stream(video_path, container))
        if not container.streams.audio:
            return AudioTrack(sample_rate, b"", has_sound=False)
        stream = container.streams.audio[0]
        resampler = av.AudioResampler(format="s16", layout="mono", rate=sample_rate)
        pieces: list[np.ndarray] = []
        offset: int | None = None  # the first sample's position on the video's clock
        try:
            for frame in container.decode(stream):
                if offset is None:
                    start = _frame_start(frame, stream)
                    offset = round((start - video_start) * sample_rate)
                pieces.extend(_mono(out) for out in resampler.resample(frame))
            pieces.extend(_mono(out) for out in resampler.resample(None))
        except av.FFmpegError as exc:
            raise VideoDecodeError(f"{video_path}: its sound cannot be decoded: {exc}") from None
    samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype="<i2")
    return AudioTrack(sample_rate, _placed(samples, offset or 0).tobytes(), has_sound=True)


def _placed(samples: np.ndarray, offset: int) -> np.ndarray:
    """Samples that start `offset` samples after time 0: silence before a late start,
    what precedes time 0 cut off."""
    if offset >= 0:
        return np.concatenate([np.zeros(offset, dtype="<i2"), samples])
    return samples[-offset:]


def _mono(frame: av.AudioFrame) -> np.ndarray:
    return frame.to_ndarray().reshape(-1).astype("<i2", copy=False)


def _stream_start(stream: av.VideoStream) -> Fraction:
    return (stream.start_time or 0) * Fraction(stream.time_base)


def _frame_start(frame: av.AudioFrame, stream: av.AudioStream) -> Fraction:
    if frame.pts is None:
        return _stream_start(stream)
    return frame.pts * Fraction(frame.time_base or stream.time_base)

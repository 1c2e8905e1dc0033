"""Synthetic H.264 test videos for the benchmarks.

The picture is two smooth random textures panning in different directions, blended, with
panning colour: motion compensation cannot predict it for free, so it codes at a realistic
bitrate (about 7 Mbit/s at 720p30 with preset ultrafast) and decodes at a realistic speed.
Motion bounces back and forth instead of wrapping, so no jump looks like a scene cut and
keyframes come every `gop` frames, as in ordinary encodes.

    from bench.make_video import cached_video, make_video
    path = cached_video(Path("bench/out"), seconds=3600, width=1280, height=720, fps=30)
"""

from __future__ import annotations

import os
import time
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
from PIL import Image

# How far the textures travel before turning back; also the texture margin in pixels.
TRAVEL_PX = 256


def _texture(rng: np.random.Generator, height: int, width: int, cell: int) -> np.ndarray:
    """Random values on a `cell`-pixel grid, smoothly interpolated to height x width."""
    rows, cols = height // cell + 2, width // cell + 2
    coarse = Image.fromarray(rng.integers(0, 256, (rows, cols), dtype=np.uint8))
    fine = np.asarray(coarse.resize((cols * cell, rows * cell), Image.Resampling.BICUBIC))
    return fine[:height, :width]


def _bounce(step: int) -> int:
    """0, 1, ..., TRAVEL_PX - 1, TRAVEL_PX - 1, ..., 0, 0, 1, ...: a position that never jumps."""
    phase = step % (2 * TRAVEL_PX)
    return phase if phase < TRAVEL_PX else 2 * TRAVEL_PX - 1 - phase


class _Scene:
    """Frame i of the moving picture, as a yuv420p array."""

    def __init__(self, width: int, height: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.width, self.height = width, height
        self.fine = _texture(rng, height + TRAVEL_PX, width + TRAVEL_PX, cell=16)
        self.coarse = _texture(rng, height + TRAVEL_PX, width + TRAVEL_PX, cell=128)
        half_h, half_w = (height + TRAVEL_PX) // 2, (width + TRAVEL_PX) // 2
        self.u = _texture(rng, half_h, half_w, cell=16)
        self.v = _texture(rng, half_h, half_w, cell=16)

    def frame(self, i: int) -> np.ndarray:
        w, h = self.width, self.height
        fx, fy = _bounce(3 * i), _bounce(2 * i)
        cx, cy = TRAVEL_PX - 1 - _bounce(i), _bounce(5 * i)
        fine = self.fine[fy : fy + h, fx : fx + w].astype(np.uint16)
        coarse = self.coarse[cy : cy + h, cx : cx + w]
        luma = ((fine * 3 + coarse) >> 2).astype(np.uint8)
        ux, uy = fx // 2, fy // 2
        u = self.u[uy : uy + h // 2, ux : ux + w // 2]
        v = self.v[uy : uy + h // 2, ux : ux + w // 2]
        # PyAV's yuv420p array layout: the Y plane, then U and V folded to full-width rows.
        return np.concatenate([luma, u.reshape(-1, w), v.reshape(-1, w)])


def make_video(
    path: Path,
    seconds: float,
    width: int,
    height: int,
    fps: int | Fraction,
    gop: int = 250,
    preset: str = "ultrafast",
    seed: int = 0,
) -> Path:
    """Encode a moving synthetic H.264 MP4 at `path` (written whole or not at all)."""
    if width % 2 or height % 2:
        raise ValueError(f"yuv420p needs even dimensions, got {width}x{height}")
    scene = _Scene(width, height, seed)
    n_frames = round(seconds * fps)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}.mp4")
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(partial), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"preset": preset, "g": str(gop)}
        for i in range(n_frames):
            frame = av.VideoFrame.from_ndarray(scene.frame(i), format="yuv420p")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    partial.rename(path)
    return path


def cached_video(
    out_dir: Path,
    seconds: float,
    width: int,
    height: int,
    fps: int | Fraction,
    gop: int = 250,
    preset: str = "ultrafast",
) -> Path:
    """The video under out_dir named by its parameters, encoded on first use."""
    path = (
        out_dir / f"synthetic-{seconds:g}s-{width}x{height}-{float(fps):g}fps-gop{gop}-{preset}.mp4"
    )
    if not path.exists():
        started = time.perf_counter()
        print(f"encoding {path} ({seconds:g} s of video) ...", flush=True)
        make_video(path, seconds, width, height, fps, gop, preset)
        print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)
    return path

"""Frame messages shared by every session of the process: each sample read from disk once.

Sessions of a run mostly stream the same videos, often in step (the same benchmark video
asked many questions). Reading the JPEG from the frame cache once per session read it N
times, and encoding the binary message once per session built N identical messages: the
frame header carries only the sample's own fields (index, id, time, size), nothing of the
session, so one message serves every session. A frame a perturbation delivers at another
time than its sample's gets a copy with that time in its header (`retimed`), never kept.

Reads run on this module's reader threads, never on the event loop: a disk that stalls delays
only the sessions that wait for that frame. A read also fetches the next few samples of the
same entry (a session that asked for sample k asks for k + 1 next), and concurrent requests
for a sample being read wait for that one read. Messages are kept in a least-recently-used
map bounded in bytes; a sample that could not be read is never kept, so the next request
reads it again and sees the error itself.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from streameval.core.frames.errors import FramesError
from streameval.core.frames.types import FrameRef
from streameval.core.session.recorder import frame_sent_payload
from streameval.protocol import FrameHeader, encode_frame

# 128 MiB holds a one-hour 1 fps video of 320-wide frames, or about 1,000 frames of 960-wide
# ones: enough for sessions streaming the same videos to meet in the map.
DEFAULT_MAX_BYTES = 128 * 2**20
# A read of sample k also reads up to this many following samples: one thread hop and one
# wake-up for several frames, and the session's next frame is ready before it is due.
DEFAULT_PREFETCH = 8
# Two readers: one slow disk read does not hold up every other entry's reads.
DEFAULT_READERS = 2


class Frames(Protocol):
    """What this module needs of `frames.VideoFrames`."""

    directory: Path
    frames: tuple[FrameRef, ...]

    def read(self, ref: FrameRef) -> bytes: ...


@dataclass(frozen=True, slots=True)
class FrameMessage:
    ref: FrameRef
    data: bytes  # the whole binary WebSocket message: header length, header, JPEG
    nbytes: int  # of the JPEG alone, as the frame_sent event records it
    # The frame_sent payload of this message delivered at its sample's own time with no
    # schedule (logical pacing), made once with the message instead of at every send.
    sent_as_sampled: str


_Key = tuple[Path, int]  # (frame cache entry folder, sample index): one JPEG file
_Outcome = FrameMessage | FramesError | ValueError
_Batch = Future[dict[int, _Outcome]]


def build_message(ref: FrameRef, payload: bytes) -> FrameMessage:
    """The sample's message, stamped with the sample's own time."""
    sent = frame_sent_payload(
        index=ref.index,
        frame_id=ref.frame_id,
        t=ref.t,
        source_t=None,
        scheduled_ns=None,
        lag_ns=None,
        nbytes=len(payload),
        width=ref.width,
        height=ref.height,
    )
    return FrameMessage(ref, _encoded(ref, payload, ref.t), len(payload), sent)


def retimed(message: FrameMessage, t: float) -> FrameMessage:
    """The message with time stamp `t` in its header (a frame delivered at another time: a
    robustness run's jitter). Built per send and never kept: the shared map holds only
    messages stamped with their sample's own time, so a session that delivers a sample at
    another time can never hand its copy to a clean one."""
    payload = message.data[len(message.data) - message.nbytes :]
    data = _encoded(message.ref, payload, t)
    return FrameMessage(message.ref, data, message.nbytes, message.sent_as_sampled)


def _encoded(ref: FrameRef, payload: bytes, t: float) -> bytes:
    header = FrameHeader(
        index=ref.index,
        frame_id=ref.frame_id,
        t=t,
        width=ref.width,
        height=ref.height,
        nbytes=len(payload),
    )
    return encode_frame(header, payload)


class FrameMessages:
    """A bounded, process-wide map of encoded frame messages, filled by reader threads."""

    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        prefetch: int = DEFAULT_PREFETCH,
        readers: int = DEFAULT_READERS,
    ) -> None:
        self.max_bytes = max_bytes
        self.prefetch = prefetch
        self.reads = 0  # JPEG files read from disk, ever
        self._readers = readers
        self._lock = threading.Lock()  # the map is filled by reader threads
        self._kept: OrderedDict[_Key, FrameMessage] = OrderedDict()
        self._kept_bytes = 0
        self._reading: dict[_Key, _Batch] = {}
        self._executor: ThreadPoolExecutor | None = None

    def cached(self, frames: Frames, ref: FrameRef) -> FrameMessage | None:
        """The message if it is in memory (no I/O, no wait)."""
        key = (frames.directory, ref.index)  # a Path keeps its hash: no string per call
        with self._lock:
            message = self._kept.get(key)
            if message is None or (message.ref is not ref and message.ref != ref):
                return None
            self._kept.move_to_end(key)
            return message

    async def get(self, frames: Frames, ref: FrameRef) -> FrameMessage:
        """The sample's message, read on a reader thread if it is not in memory. Raises
        what `frames.read` raised for it (a FramesError; ValueError for a foreign ref)."""
        message = self.cached(frames, ref)
        if message is not None:
            return message
        batch = self._batch_reading(frames, ref)
        # Shielded: a session cancelled while waiting must not cancel a read others await.
        outcome = (await asyncio.shield(asyncio.wrap_future(batch)))[ref.index]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def forget(self, directory: Path) -> None:
        """Drop every message of a frame cache entry (it was found broken and is rebuilt)."""
        with self._lock:
            for key in [key for key in self._kept if key[0] == directory]:
                self._kept_bytes -= len(self._kept.pop(key).data)

    def _batch_reading(self, frames: Frames, ref: FrameRef) -> _Batch:
        """The read under way that covers `ref`, or a new one of `ref` and the samples after
        it that are neither in memory nor being read."""
        folder = frames.directory
        with self._lock:
            batch = self._reading.get((folder, ref.index))
            if batch is not None:
                return batch
            refs = [ref, *self._prefetched(frames, ref, folder)]
            # Registered under the lock the batch needs to finish: never stale.
            batch = self._pool().submit(self._read_batch, frames, refs)
            for each in refs:
                self._reading[(folder, each.index)] = batch
            return batch

    def _prefetched(self, frames: Frames, ref: FrameRef, folder: Path) -> list[FrameRef]:
        samples = frames.frames
        if not (0 <= ref.index < len(samples) and samples[ref.index] == ref):
            return []  # a foreign ref: its read raises; nothing after it is known
        following = samples[ref.index + 1 : ref.index + 1 + self.prefetch]
        return [
            each
            for each in following
            if (folder, each.index) not in self._kept and (folder, each.index) not in self._reading
        ]

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._readers, "streameval-frames")
        return self._executor

    def _read_batch(self, frames: Frames, refs: list[FrameRef]) -> dict[int, _Outcome]:
        folder = frames.directory
        outcomes: dict[int, _Outcome] = {}
        try:
            for ref in refs:
                outcomes[ref.index] = self._read_one(frames, ref)
        finally:
            self._keep(folder, refs, outcomes)
        return outcomes

    def _read_one(self, frames: Frames, ref: FrameRef) -> _Outcome:
        try:
            payload = frames.read(ref)
        except (FramesError, ValueError) as exc:
            return exc
        return build_message(ref, payload)

    def _keep(self, folder: Path, refs: list[FrameRef], outcomes: dict[int, _Outcome]) -> None:
        with self._lock:
            self.reads += len(outcomes)
            for ref in refs:
                self._reading.pop((folder, ref.index), None)
                message = outcomes.get(ref.index)
                if isinstance(message, FrameMessage):
                    self._put((folder, ref.index), message)

    def _put(self, key: _Key, message: FrameMessage) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self._kept_bytes -= len(old.data)
        self._kept[key] = message
        self._kept_bytes += len(message.data)
        while self._kept_bytes > self.max_bytes and len(self._kept) > 1:
            _, evicted = self._kept.popitem(last=False)
            self._kept_bytes -= len(evicted.data)


# The Core's one map: every session of the process reads through it.
SHARED = FrameMessages()

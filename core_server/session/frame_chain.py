"""Logical pacing's runs of frames, sent on from the acks' handlers and written in batches.

Within a run of consecutive frames, the handler that records frame N's ack decides that
frame N + 1 goes next (`FrameChain.send_next`, the `Waits.then` hook), so a frame costs no
future, task wake-up or coroutine. It does not write it there: the loop's `FrameOutbox`
writes every frame its handlers decided on once the event loop has handled all it read in
that turn. Written from each handler, a frame reached an adapter that had answered the one
before faster than the Core took to handle the next ack, so the adapter was asleep at every
write and each write paid for waking it (on a virtual machine an interrupt to another
virtual CPU): the Core's largest cost per frame. Written together, one wake-up serves the
batch, and the adapter's acks come back as a batch (BENCHMARKS.md, "The Core's send path").
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from typing import Protocol

from streameval.core.session.frame_messages import FrameMessage
from streameval.core.session.recorder import streaming_failure
from streameval.core.session.waiting import Waits
from streameval.core.store.store import StoreError
from streameval.core.streams.timeline import TimelineItem

log = logging.getLogger("streameval.core")


class ChainedStream(Protocol):
    """What a chain needs of its session's send path (`sender.SessionStream`)."""

    waits: Waits
    task_id: str

    @property
    def outbox(self) -> FrameOutbox: ...

    def ready_message(self, item: TimelineItem) -> FrameMessage | None: ...

    def write_queued(self, item: TimelineItem, message: FrameMessage) -> bool: ...


class FrameChain:
    """The rest of a run of frames: `position` is the next one to send."""

    def __init__(self, stream: ChainedStream, items: Sequence[TimelineItem], position: int):
        self.stream = stream
        self.items = items
        self.position = position

    def send_next(self) -> bool:
        """Called with the last frame's ack: True once the next frame is queued for the
        outbox (and the session's wait moved on to its ack); False when there is none or it
        cannot go without waiting (`SessionStream.ready_message`), for the session's
        coroutine to send it."""
        if self.position == len(self.items):
            return False
        item = self.items[self.position]
        message = self.stream.ready_message(item)
        if message is None:
            return False
        assert item.frame is not None
        self.stream.waits.move_on_to_ack(item.frame.index)
        self.stream.outbox.add(self, message)
        return True

    def write(self, message: FrameMessage) -> None:
        """Write the queued frame (the outbox's turn); one that cannot be written now goes
        back to the session's coroutine."""
        if self.stream.write_queued(self.items[self.position], message):
            self.position += 1


class FrameOutbox:
    """The frames an event loop's ack handlers queued, written at the loop's next turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: list[tuple[FrameChain, FrameMessage]] = []

    def add(self, chain: FrameChain, message: FrameMessage) -> None:
        if not self._queued:
            self._loop.call_soon(self._write_all)
        self._queued.append((chain, message))

    def _write_all(self) -> None:
        queued, self._queued = self._queued, []
        for chain, message in queued:
            try:
                chain.write(message)
            except StoreError as exc:
                chain.stream.waits.fail(streaming_failure(exc))
            except Exception as exc:  # a bug here must fail the session, never hang it
                log.exception("session %s: error writing a frame", chain.stream.task_id)
                chain.stream.waits.fail(streaming_failure(exc))


_OUTBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FrameOutbox] = (
    weakref.WeakKeyDictionary()
)


def running_outbox() -> FrameOutbox:
    """The running event loop's outbox, shared by all of its sessions."""
    loop = asyncio.get_running_loop()
    outbox = _OUTBOXES.get(loop)
    if outbox is None:
        outbox = _OUTBOXES[loop] = FrameOutbox(loop)
    return outbox

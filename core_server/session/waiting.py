"""The send side's one wait, and the session's first failure.

The pacing waits for one thing at a time (a frame's ack, a decision, the close); the receive
loop resolves it, or fails it when the session fails. The first failure is kept: it is the
one the session is recorded with, whatever breaks afterwards while tearing down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streameval.core.session.failures import FailureStage, SessionFailure
from streameval.core.session.protocol_state import Awaited, Resolution
from streameval.events import FailureCause


def ack_wait(index: int) -> str:
    """What a frame's ack wait is called in a timeout's reason."""
    return f"frame {index} acknowledgement"


class Waits:
    """The current wait (a future and what resolves it) and the first failure."""

    def __init__(self, response_timeout_s: float) -> None:
        self.response_timeout_s = response_timeout_s
        self.failure: SessionFailure | None = None
        self._future: asyncio.Future[None] | None = None
        self._expected: Resolution | None = None
        # The future waited for and its name in a timeout's reason (None: the ack of the
        # frame `_expected` names, see `move_on_to_ack`).
        self._waiting: tuple[asyncio.Future[None], str | None] | None = None
        self._deadline = 0.0  # loop time at which the current wait times out
        self._timer: asyncio.TimerHandle | None = None
        self._running_loop: asyncio.AbstractEventLoop | None = None
        # Called when the current wait is answered, before its future is: True when it sent
        # what comes next on (frame_chain.py) and moved the wait on to that instead.
        self.then: Callable[[], bool] | None = None

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        # Found once: on Python 3.11 every asyncio.get_running_loop() is a getpid() system
        # call, and a session waits twice per frame.
        if self._running_loop is None:
            self._running_loop = asyncio.get_running_loop()
        return self._running_loop

    def expect(self, awaited: Awaited, key: int | None = None) -> asyncio.Future[None]:
        """Start waiting, before sending what is answered, so no answer can be missed."""
        self.check()
        self._future = self._loop.create_future()
        self._expected = Resolution(awaited, key)
        return self._future

    def resolve(self, resolution: Resolution) -> None:
        future = self._future
        if future is None or future.done() or self._expected is None:
            return
        if resolution.satisfies(self._expected):
            if self.then is not None and self.then():
                return
            future.set_result(None)

    def settle(self) -> None:
        """Answer the current wait without the `then` hook, which moved it on to something
        it then could not send: the waiter sends that itself."""
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def move_on_to_ack(self, index: int) -> None:
        """Let the current wait's future stand for frame `index`'s ack now, with a new
        deadline: the `then` hook sent that frame on. Called before it is written, as
        `expect` is. The wait's name (`ack_wait`) is made only if it times out."""
        self._expected = Resolution(Awaited.ACK, index)
        self._deadline = self._loop.time() + self.response_timeout_s
        if self._waiting is not None:
            self._waiting = (self._waiting[0], None)

    async def wait(self, future: asyncio.Future[None], what: str) -> None:
        """Wait for `future` up to the response timeout; `what` names it in the reason."""
        loop = self._loop
        self._waiting = (future, what)
        self._deadline = loop.time() + self.response_timeout_s
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._expire)
        try:
            await future
        finally:
            self._waiting = None
        self.check()

    def _expire(self) -> None:
        self._timer = None
        if self._waiting is None:
            return  # between waits: the next one arms the timer again
        loop = self._loop
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._expire)
            return
        future, what = self._waiting
        if what is None:
            assert self._expected is not None and self._expected.key is not None
            what = ack_wait(self._expected.key)
        if not future.done():
            reason = f"no {what} within {self.response_timeout_s:g}s"
            failure = SessionFailure(FailureStage.RESPONSE, reason, FailureCause.INFRASTRUCTURE)
            future.set_exception(failure)

    def close(self) -> None:
        """Stop the timer (the session ended): it would keep this object alive until then."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def check(self) -> None:
        """Raise the session's failure, if it has failed."""
        if self.failure is not None:
            raise self.failure

    def fail(self, failure: SessionFailure) -> None:
        """Fail the session (the first failure wins) and wake whoever waits."""
        if self.failure is None:
            self.failure = failure
        if self._future is not None and not self._future.done():
            self._future.set_exception(failure)
            # Marked as seen: the send side may no longer wait for it (a stopping run cancels
            # it), and the failure is kept above, so asyncio must not report it as lost.
            self._future.exception()

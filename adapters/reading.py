"""Reading the Core's connection: paused while a slow hook has messages waiting (the inbox's
back-pressure, inbox.py), without losing sight of the Core meanwhile.

While reading is paused nothing is read from the socket, the Core's close included: it
waits behind the unread frames, and a Core that gave up on the session would only show
through the heartbeat (up to `HEARTBEAT_INTERVAL_S` + `HEARTBEAT_TIMEOUT_S`, 40 s), all
that time keeping the abandoned hook (a model call) running. So while paused, a ping goes
out every `PROBE_S`: once the Core has closed its socket, its system answers the ping with
a reset, the next write fails, the connection ends and the hook is cancelled. A Core still
there answers with pongs, read with the rest once reading resumes.
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.connection import Connection
from websockets.protocol import OPEN

from streameval.fast_send import writable

PROBE_S = 0.25
_PROBE = b"streameval: still there?"


class PausableReading:
    """`pause` and `resume` for an `Inbox`, probing the connection while paused."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._probe: asyncio.TimerHandle | None = None

    def pause(self) -> None:
        self._connection.transport.pause_reading()
        self._schedule()

    def resume(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        self._connection.transport.resume_reading()

    def _schedule(self) -> None:
        self._probe = asyncio.get_running_loop().call_later(PROBE_S, self._ping)

    def _ping(self) -> None:
        connection = self._connection
        if connection.transport.is_closing():
            return  # the connection's end is on its way to the inbox
        if connection.protocol.state is not OPEN:
            # The Core's close was read with the last frames before the pause: the end of
            # its socket never will be (nothing is read), so end the connection here.
            connection.transport.abort()
            return
        if writable(connection):
            # Written as websockets writes its keepalive pings, less the pong waiter: the
            # pong, read later, matches no ping and is dropped.
            connection.protocol.send_ping(_PROBE)
            connection.send_data()
        # else the write buffer is full (the Core is not reading either): look again later.
        self._schedule()

"""Real pseudo-terminals for the tests of what a user sees: a terminal of a chosen size,
everything a command writes to it (answering a prompt on the way), and that text as the
screen shows it, without control sequences."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import termios

# Colours, cursor moves (the progress display's), titles and charset switches take no columns.
CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")


def sized_terminal(columns: int, lines: int = 50) -> tuple[int, int]:
    """A new pseudo-terminal of `columns` x `lines`: (leader, follower) descriptors; the
    command gets the follower, the test reads the leader."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    return leader, follower


def read_terminal(leader: int, timeout: float, reply: tuple[bytes, bytes] | None = None) -> bytes:
    """Everything written to the terminal until the command closes it (read as it comes:
    a full terminal would block the command). `reply` = (prompt, answer): type the answer
    once the prompt has been shown."""
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], timeout)
        assert ready, f"nothing written to the terminal for {timeout} s: {seen[-500:]!r}"
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the command closed its side
            return seen
        if not chunk:
            return seen
        seen += chunk
        if reply is not None and reply[0] in seen:
            os.write(leader, reply[1])
            reply = None


def plain(shown: bytes) -> str:
    """The text the screen shows, control sequences removed."""
    return CONTROL.sub("", shown.decode(errors="replace"))

"""The "listening on URL" line every streameval server prints once its socket listens.

    results API listening on http://127.0.0.1:8800
    control API listening on all interfaces (0.0.0.0): http://127.0.0.1:8700
    streameval-adapter listening on ws://127.0.0.1:8765/ws

The URL is always the line's last word, with the port the OS chose when port 0 was asked,
and is one a user can open: a server bound to all interfaces names loopback.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from streameval.errors import UserError

if TYPE_CHECKING:
    from fastapi import FastAPI

# Addresses that mean "every interface", and the loopback address a user opens instead.
_ALL_INTERFACES = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


def server_url(scheme: str, host: str, port: int, path: str = "") -> str:
    """`scheme://host:port/path` that a user can open from this machine."""
    host = _ALL_INTERFACES.get(host, host)
    if ":" in host:  # IPv6, bracketed as in a URL
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}{path}"


def listening_line(service: str, scheme: str, host: str, port: int, path: str = "") -> str:
    url = server_url(scheme, host, port, path)
    if host in _ALL_INTERFACES:
        return f"{service} listening on all interfaces ({host or '0.0.0.0'}): {url}"
    return f"{service} listening on {url}"


def listened_url(line: str) -> str:
    """The URL a listening line names."""
    return line.split()[-1]


def serve_app(app: FastAPI, host: str, port: int, service: str) -> None:
    """Serve `app` with uvicorn until interrupted, printing its listening line once the
    socket listens. Raises UserError (one line) when host:port cannot be bound."""
    import uvicorn  # deferred: only the commands that serve need it

    # Bound here rather than by uvicorn, so that the line can name the real port.
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
        sock.bind((host, port))
        sock.listen()
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    print(listening_line(service, "http", host, sock.getsockname()[1]), flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])

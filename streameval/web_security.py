"""What every answer of streameval's HTTP services carries, and which `Host` names the
results API answers to (docs/security.md, "Browser-facing headers").

`ProtectedApp` is the FastAPI app both APIs are (the results API with the dashboard, the
Core's control API). Outermost, around Starlette's own error handling, so that a 404, a 400
or an unhandled error's 500 carries the same headers as a page:

- `Content-Security-Policy`: scripts, styles, fonts and connections from the app's own
  origin only (the dashboard has no inline script or style attribute), images also as
  `data:` and `blob:` URLs (the dashboard's SVG and PNG downloads), no plugins, no
  `<base>`, and no framing (`frame-ancestors 'none'`). A route that sets its own policy
  keeps it (the API docs pages, streameval/api_docs.py).
- `X-Frame-Options: DENY` for browsers that predate `frame-ancestors`.
- `X-Content-Type-Options: nosniff`: a JSON answer or a frame is never run as a script.

With `allowed_hosts`, a request whose `Host` is not allowed is answered 400 with one line:
a page on another site whose name was re-pointed at this machine (DNS rebinding) sends its
own name, so it cannot read what a loopback-bound server answers.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import FastAPI
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSP_DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data: blob:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ALLOWED_HOSTS_ENV = "STREAMEVAL_ALLOWED_HOSTS"
ANY_HOST = "*"


def content_security_policy(**relaxed: str) -> str:
    """The policy, with the directives in `relaxed` (`script_src="'self' 'unsafe-inline'"`)
    replacing or adding to the defaults: frame denial and the rest stay."""
    directives = {**CSP_DIRECTIVES, **{k.replace("_", "-"): v for k, v in relaxed.items()}}
    return "; ".join(f"{name} {value}" for name, value in directives.items())


SECURITY_HEADERS = {
    "content-security-policy": content_security_policy(),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
}


def host_name(header: str) -> str:
    """The name in a `Host` header, without its port or an IPv6 address's brackets, lower
    case: `[::1]:8800` -> `::1`, `LocalHost:80` -> `localhost`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class AllowedHosts:
    """The `Host` names a server answers to (any port): `names`, and with `any_ip` every IP
    address, which no DNS rebinding can send (it needs a name the attacker resolves)."""

    names: frozenset[str]
    any_ip: bool = False

    def allows(self, header: str) -> bool:
        name = host_name(header)
        if ANY_HOST in self.names or name in self.names:
            return True
        return self.any_ip and _is_ip(name)

    @classmethod
    def for_bind(cls, bind: str, extra: Iterable[str] = ()) -> AllowedHosts:
        """The default for a server bound to `bind`, plus the names in `extra` (`*`: any).

        Bound to loopback: the loopback names alone. Bound elsewhere: those, any IP address,
        the machine's host name and fully qualified name, and `bind` itself when it is a name.
        Any other name (a DNS alias, a compose service, a proxy's public name) is added by
        the operator."""
        names = {*LOOPBACK_NAMES, *(host_name(name) for name in extra)}
        if _is_loopback(bind):
            return cls(frozenset(names))
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        if bind not in ("", "0.0.0.0", "::"):
            names.add(host_name(bind))
        return cls(frozenset(names), any_ip=True)


def _is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def split_host_list(values: Iterable[str]) -> list[str]:
    """`--allowed-host` values and the environment variable: names separated by commas or
    spaces, each possibly with a port (ignored)."""
    return [name for value in values for name in value.replace(",", " ").split()]


class HttpMiddleware:
    """ASGI middleware that acts on HTTP requests (`http`) only; the rest pass through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class SecurityHeaders(HttpMiddleware):
    """ASGI middleware: every HTTP answer gets SECURITY_HEADERS, unless it set one itself."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class HostCheck:
    """ASGI middleware: an HTTP request whose `Host` is not allowed gets 400 and one line."""

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            if not self.allowed.allows(host):
                detail = (
                    f"Host {host!r} is not one this server answers to; its operator allows "
                    f"more names with --allowed-host or {ALLOWED_HOSTS_ENV}"
                )
                await JSONResponse({"detail": detail}, status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class ProtectedApp(FastAPI):
    """A FastAPI app whose every HTTP answer carries the security headers, and which answers
    only the hosts in `allowed_hosts` when it is set (None: any, as for in-process clients)."""

    allowed_hosts: AllowedHosts | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        if self.allowed_hosts is not None:
            stack = HostCheck(stack, self.allowed_hosts)
        return SecurityHeaders(stack)

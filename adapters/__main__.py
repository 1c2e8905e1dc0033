"""`python -m streameval.adapters NAME [--host H] [--port P] [--config FILE] [-A key=value ...]`.

Serves one adapter as its own process. Prints `streameval-adapter listening on
ws://HOST:PORT/ws` (the URL `streameval run --adapter-url` takes) once it accepts
connections, so a parent that asked for port 0 learns the port the OS chose.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Coroutine
from typing import Any, NoReturn

from streameval.adapters.errors import AdapterSetupError
from streameval.adapters.registry import build_adapter
from streameval.adapters.server import AdapterStartFailed, serve
from streameval.core.run.exit_codes import EXIT_CANNOT_START
from streameval.listening import listening_line
from streameval.protocol import WS_PATH

SERVICE = "streameval-adapter"
READY_PREFIX = f"{SERVICE} listening on"


def run_adapter(
    name: str, host: str, port: int, config: str | None = None, options: list[str] | None = None
) -> None:
    adapter = build_adapter(name, config, options or [])

    def ready(bound: int) -> None:
        print(listening_line(SERVICE, "ws", host, bound, WS_PATH), flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_until_terminated(serve(adapter, host, port, ready=ready)))


async def _serve_until_terminated(serving: Coroutine[Any, Any, None]) -> None:
    """SIGTERM (`docker stop`, Slurm, Kubernetes) ends the service cleanly with status 0.

    A container's PID 1 gets no default action for SIGTERM, so without a handler the
    adapter would only die by SIGKILL once the engine's grace period ran out."""
    task = asyncio.ensure_future(serving)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m streameval.adapters", description=__doc__)
    parser.add_argument("name", help="a registered adapter name or module:Class")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--config", help="YAML file of adapter options, or a preset name")
    parser.add_argument(
        "-A",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="one adapter option, overriding --config (repeatable)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        run_adapter(args.name, args.host, args.port, args.config, args.options)
    except AdapterStartFailed as exc:
        # It listened, then its start() raised: a service that failed (1, as
        # docs/adapter-guide.md says), not one that could not start (2).
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except AdapterSetupError as exc:
        _cannot_start(str(exc))
    except OSError as exc:
        _cannot_start(f"cannot listen on {args.host}:{args.port}: {exc.strerror}")


def _cannot_start(message: str) -> NoReturn:
    """Exit 2 with one line, as every `streameval` command that could not start does."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(EXIT_CANNOT_START)


if __name__ == "__main__":
    main()

"""Simulated GPUs for bench/bench_fleet.py: several adapter endpoints in one process, each a
real WebSocket adapter service (adapters/server.py) with a service-time model instead of a
model, so 32 "GPUs" cost a 2-core machine almost nothing (they sleep instead of computing).

    python -m bench.fleet_gpus --ports 0,0,0,0 --prefill-s 0.01 --decode-s 0.2 --cap 1 \
        --log gpus.jsonl

Each endpoint: a frame costs `prefill_s`, an answer `decode_s`, and at most `cap` of these
run at once on it (a served model's batch); a session waiting for the cap waits its turn, as
a request queued at a vLLM server does. Every session start and end is appended to `--log`
as one JSON line (wall-clock time, endpoint port, session id), which is how the bench
measures each GPU's busy time and when a session reached its GPU. One "listening on" line
per endpoint, in --ports order; restarting the process with the ports it printed is an
adapter restart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path
from typing import TextIO

from streameval.adapters.sdk import Adapter, Frame, Responder, Session
from streameval.adapters.server import serve
from streameval.listening import listening_line
from streameval.protocol import WS_PATH, AdapterConditions, Instruction, Question, Step

SERVICE = "fleet-gpu"


class SimulatedGpu(Adapter):
    """One GPU: sleeps for its service times under a concurrency cap, answers "A"."""

    name = "fleet-gpu"
    conditions = AdapterConditions(state="native", initiation="polled", model_name="fleet-gpu")
    resume_grace_s = 0.0

    def __init__(self, prefill_s: float, decode_s: float, cap: int, log: TextIO) -> None:
        self.prefill_s = prefill_s
        self.decode_s = decode_s
        self.slots = asyncio.Semaphore(cap)
        self.log = log
        self.port = 0  # set once it listens

    def _note(self, what: str, session: Session) -> None:
        line = {"t": time.time(), "what": what, "port": self.port, "session": session.session_id}
        self.log.write(json.dumps(line) + "\n")
        self.log.flush()

    async def _busy(self, seconds: float) -> None:
        async with self.slots:
            await asyncio.sleep(seconds)

    async def on_session_start(self, session: Session) -> None:
        self._note("start", session)

    async def on_session_end(self, session: Session) -> None:
        self._note("end", session)

    async def on_frame(self, session: Session, frame: Frame) -> None:
        await self._busy(self.prefill_s)

    async def on_question(self, session: Session, question: Question, respond: Responder):
        await self._busy(self.decode_s)
        await respond.say("A")

    async def on_instruction(
        self, session: Session, instruction: Instruction, respond: Responder
    ) -> None:
        return None

    async def on_step(self, session: Session, step: Step, respond: Responder) -> None:
        await respond.silent(step.step)


async def _serve_one(gpu: SimulatedGpu, port: int) -> asyncio.Task[None]:
    """Serve `gpu` on `port`; returns once it listens (and its line is printed)."""
    up = asyncio.Event()

    def listening(bound: int) -> None:
        gpu.port = bound
        print(listening_line(SERVICE, "ws", "127.0.0.1", bound, WS_PATH), flush=True)
        up.set()

    task = asyncio.create_task(serve(gpu, port=port, ready=listening))
    await up.wait()
    return task


async def serve_all(gpus: list[SimulatedGpu], ports: list[int]) -> None:
    """Serve every GPU until SIGTERM; they start one after the other, so the listening
    lines come out in --ports order."""
    tasks = [await _serve_one(gpu, port) for gpu, port in zip(gpus, ports, strict=True)]
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", required=True, help="comma-separated; 0 lets the OS choose")
    parser.add_argument("--prefill-s", type=float, required=True)
    parser.add_argument("--decode-s", type=float, required=True)
    parser.add_argument("--cap", type=int, default=1)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    ports = [int(p) for p in args.ports.split(",")]
    with args.log.open("a") as log:
        gpus = [SimulatedGpu(args.prefill_s, args.decode_s, args.cap, log) for _ in ports]
        asyncio.run(serve_all(gpus, ports))


if __name__ == "__main__":
    main()

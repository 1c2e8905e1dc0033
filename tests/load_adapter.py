"""An adapter whose answers slow down with load, exactly: its time to first token is
`ttft_per_session_s` x the sessions open at the question, so a capacity search's knee is
known in advance (tests/test_capacity.py). It runs as a real WebSocket service in its own
process (`python -m streameval.adapters tests.load_adapter:LoadAdapter -A ...`).

With `metrics_port_file`, it also serves vLLM-named Prometheus metrics on a loopback port
of its own (written to that file): the requests answering now, the requests answered, and a
TTFT histogram's sum and count, as a vLLM server's /metrics has them.
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from streameval.adapters.sdk import Adapter, Responder, Session
from streameval.protocol import INFO_SERVER_METRICS, AdapterConditions, Question


class LoadConfig(BaseModel):
    ttft_per_session_s: float = 0.1
    metrics_port_file: str | None = None


class LoadAdapter(Adapter):
    name = "load"
    conditions = AdapterConditions(state="native", initiation="polled", model_name="load")
    Config = LoadConfig

    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self.open_sessions = 0
        self.running = 0  # questions being answered now
        self.answered = 0
        self.ttft_sum_s = 0.0
        self.metrics_url: str | None = None
        if config.metrics_port_file is not None:
            # Before the adapter listens: once a test sees the adapter up, the port is known.
            self._serve_metrics(Path(config.metrics_port_file))

    def _serve_metrics(self, port_file: Path) -> None:
        adapter = self

        class Metrics(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server hook's name)
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = adapter.prometheus_text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass  # stderr stays for the adapter's own lines

        server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port_file.write_text(str(server.server_address[1]))
        self.metrics_url = f"http://127.0.0.1:{server.server_address[1]}/metrics"

    def info(self) -> dict[str, Any]:
        """/info names the metrics endpoint, as the `openai` adapter names its server's."""
        if self.metrics_url is None:
            return super().info()
        return {**super().info(), INFO_SERVER_METRICS: self.metrics_url}

    def prometheus_text(self) -> str:
        model = 'model_name="load"'
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{model}}} {self.running}.0\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{model}}} 0.0\n"
            "# TYPE vllm:request_success_total counter\n"
            f'vllm:request_success_total{{finished_reason="stop",{model}}} {self.answered}.0\n'
            f'vllm:request_success_total{{finished_reason="length",{model}}} 0.0\n'
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",{model}}} {self.answered}.0\n'
            f"vllm:time_to_first_token_seconds_sum{{{model}}} {self.ttft_sum_s!r}\n"
            f"vllm:time_to_first_token_seconds_count{{{model}}} {self.answered}.0\n"
        )

    async def on_session_start(self, session: Session) -> None:
        self.open_sessions += 1

    async def on_session_end(self, session: Session) -> None:
        self.open_sessions -= 1

    async def on_question(self, session: Session, question: Question, respond: Responder):
        delay = self.config.ttft_per_session_s * self.open_sessions
        self.running += 1
        await asyncio.sleep(delay)
        self.running -= 1
        self.answered += 1
        self.ttft_sum_s += delay
        await respond.say("A")

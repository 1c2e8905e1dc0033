"""The engine errors of vLLM's V1 engine, under their real module path and names."""

from http import HTTPStatus


class EngineGenerateError(Exception):
    """One `generate` failed; the engine lives on (vLLM raises it `from` the cause)."""


class EngineDeadError(Exception):
    """The engine core process is gone; every later request fails too."""

    def __init__(self, *args, suppress_context: bool = False, **kwargs):
        super().__init__(
            "EngineCore encountered an issue. See stack trace (above) for the root cause."
        )
        self.__suppress_context__ = suppress_context


class GracefulHTTPError(ValueError):
    """A refusal vLLM expects in normal operation, carrying an HTTP status."""

    def __init__(self, message: str, http_status: HTTPStatus):
        super().__init__()
        self.message = message
        self.http_status = http_status


class QueueOverflowError(GracefulHTTPError):
    def __init__(self):
        super().__init__("Request queue full.", HTTPStatus.SERVICE_UNAVAILABLE)

"""vLLM's request validation error (a ValueError, as vLLM's handlers expect)."""


class VLLMValidationError(ValueError):
    pass

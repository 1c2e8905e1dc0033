"""Generated token ids as text pieces, one per token, so deltas and tokens correspond.

Pure Python (the tokenizer's decode is passed in), so the rule is testable without a model.
"""

from __future__ import annotations

from collections.abc import Callable

# What a byte-level decoder shows for bytes that are not (yet) valid UTF-8.
REPLACEMENT = "\ufffd"


class IncrementalText:
    """A byte-level token may end inside a multi-byte character; its piece is then empty and
    the character goes out with the token that completes it. Bytes still incomplete when
    generation ends carry no text and are left out.
    """

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self.text = ""

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        decoded = self._decode(self._ids)
        if decoded.endswith(REPLACEMENT):
            return ""
        piece = decoded[len(self.text) :]
        self.text = decoded
        return piece

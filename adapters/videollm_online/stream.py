"""One session's conversation in VideoLLM-online's format, on its KV cache.

The format (showlab/videollm-online, models/tokenization_live.py and demo/inference.py):

    <bos>{system}\n
    [<frame>,<frame>,<frame>]
    User: {question}
    Assistant: {answer}<eos>
    [<frame>,<frame>]
    Assistant: {commentary}<eos>
    [<frame>, ...

After each frame the model predicts the next token: the frame interval `,` continues the
list (it stays silent), anything else ends it, and the model speaks: `]\nAssistant:` is fed
and the answer generated. A token the model chose is fed with what follows it (the `,` with
the next frame, the answer's `<eos>` with the next turn), as in the release's demo, so each
forward pass is one frame or one turn. A user turn closes the frame list (`]\nUser: ...`); a
frame after it opens a new one (`\n[`).

Bounded memory: the cache is a list of segments. The oldest frames and the answers given at
steps may be evicted; the first frame (fed with the system prompt), user turns and the
answers to questions stay. Kept keys keep their rotary positions, and new tokens continue
after the last position, so what is kept is attended to as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # torch comes with the model, imported by the adapter's constructor only
    import torch

    from streameval.adapters.videollm_online.model import LiveModel

# What the context ends with: the system prompt, a frame, an answer or a user turn.
Last = Literal["start", "frame", "answer", "user"]
# A cache segment: `pinned` stays; `frame` and `reply` (an answer at a step) may be evicted.
SegmentKind = Literal["pinned", "frame", "reply"]
OPEN_FRAMES = "\n["
CLOSE_FRAMES = "]"
ASSISTANT = "\nAssistant:"


def user_turn(text: str) -> str:
    return f"\nUser: {text}"


@dataclass(frozen=True)
class FrameDecision:
    tokens: int  # fed with the frame: what preceded it, then its embeddings
    speak: bool


@dataclass
class Segment:
    kind: SegmentKind
    tokens: int = 0
    frame_id: str | None = None


@dataclass
class LiveStream:
    model: LiveModel
    system_prompt: str
    interval_id: int
    cache: object = None
    last: Last = "start"
    # Tokens the model chose and that are not in the cache yet: they go in with the next
    # input (the `,` after a silent frame; the answer's last token and `<eos>`).
    unfed: list[int] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    position: int = 0  # the rotary position of the next token fed

    def __post_init__(self) -> None:
        self.cache = self.model.new_cache()

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def frame_prefix(self) -> list[int]:
        """What goes before the next frame's embeddings."""
        if self.last == "frame":
            return self.unfed  # the `,` the model chose
        return self.unfed + self.model.tokenize(self._opening() + OPEN_FRAMES)

    def turn_prefix(self, text: str) -> list[int]:
        """What opens a turn `text` (a user turn, `\\nAssistant:`) after the context."""
        if self.last == "frame":
            # The model's choice after the last frame is replaced by the list's end.
            return self.model.tokenize(CLOSE_FRAMES + text)
        return self.unfed + self.model.tokenize(self._opening() + text)

    def _opening(self) -> str:
        return (
            f"{self.model.tokenizer.bos_token}{self.system_prompt}\n"
            if self.last == "start"
            else ""
        )

    def add_frame(self, embeds: torch.Tensor, threshold: float, frame_id: str) -> FrameDecision:
        """Feed a frame; decide as the release does: below `threshold` the interval token's
        probability is zeroed, and the model speaks unless the interval is the argmax."""
        prefix = self.frame_prefix()
        self.segments.append(Segment("pinned" if self.last == "start" else "frame", 0, frame_id))
        logits = self._run(prefix, embeds)
        probs = logits.softmax(dim=-1)
        below = float(probs[self.interval_id]) < threshold
        speak = below or int(probs.argmax()) != self.interval_id
        self.last, self.unfed = "frame", [self.interval_id]
        return FrameDecision(len(prefix) + embeds.shape[0], speak)

    def add_user(self, text: str) -> int:
        """A user turn the model does not answer now (an instruction); the tokens fed."""
        ids = self.turn_prefix(user_turn(text))
        self.segments.append(Segment("pinned"))
        self._run(ids)
        self.last, self.unfed = "user", []
        return len(ids)

    def open_turn(self, text: str, kind: SegmentKind) -> tuple[int, int]:
        """Feed a turn's opening; the first generated token and the tokens fed. `kind`:
        `reply` for an answer at a step, `pinned` for the answer to a question."""
        ids = self.turn_prefix(text)
        self.segments.append(Segment(kind))
        return self._greedy(ids), len(ids)

    def feed(self, token: int) -> int:
        """Feed a generated token; the next one."""
        return self._greedy([token])

    def close_turn(self, last: int | None) -> None:
        """The answer ended: with `<eos>` (last=None) or cut at a length limit (`last`, its
        token not fed yet, then `<eos>` closes the turn)."""
        self.last = "answer"
        self.unfed = [self.model.eos_id] if last is None else [last, self.model.eos_id]

    def evict(self, incoming: int, limit: int) -> list[str] | None:
        """Evict the oldest frames and step answers until `incoming` more tokens fit in
        `limit`. The evicted frames' ids; None when nothing had to go, or when evicting all
        that may go would not make room (then nothing goes)."""
        excess = self.length + incoming - limit
        if excess <= 0:
            return None
        keep: list[int] = []
        kept: list[Segment] = []
        evicted: list[Segment] = []
        start = freed = 0
        for segment in self.segments:
            if segment.kind != "pinned" and freed < excess:
                evicted.append(segment)
                freed += segment.tokens
            else:
                keep.extend(range(start, start + segment.tokens))
                kept.append(segment)
            start += segment.tokens
        if freed < excess:
            return None
        self.model.keep_slots(self.cache, keep)
        self.segments = kept
        return [s.frame_id for s in evicted if s.frame_id is not None]

    def _run(self, ids: list[int], frame: torch.Tensor | None = None) -> torch.Tensor:
        """Feed into the current segment, at the next positions."""
        count = len(ids) + (0 if frame is None else frame.shape[0])
        logits = self.model.append(self.cache, ids, frame, start=self.position)
        self.position += count
        self.segments[-1].tokens += count
        return logits

    def _greedy(self, ids: list[int]) -> int:
        return int(self._run(ids).argmax())

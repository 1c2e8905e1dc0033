"""How the next token is chosen from the model's logits: greedy or sampled, with an optional
repetition penalty, in the order Hugging Face's `generate` applies them.

- Repetition penalty (transformers' `RepetitionPenaltyLogitsProcessor`): every token id in
  the context has its score divided by the penalty when positive, multiplied by it when
  negative. `generate` takes the context to be its `input_ids`, prompt and generated tokens;
  here that is every token id in the session's cache (adapters/hf/stream.py keeps their
  counts) and so every token generated so far in the reply, which is fed back as it comes.
  Evicted tokens are out of context and no longer penalised.
- Sampling (temperature > 0): the temperature, top-k and top-p warpers in that order, then a
  draw from the softmax with the session's own seeded `torch.Generator`, so a rerun of a
  session draws the same tokens. Temperature 0 is greedy (the argmax).

Greedy without a penalty takes the argmax of the logits as they come, exactly as before these
options existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Decoding:
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int | None = None
    repetition_penalty: float = 1.0
    seed: int = 0

    @property
    def sampled(self) -> bool:
        return self.temperature > 0

    @property
    def penalised(self) -> bool:
        return self.repetition_penalty != 1.0


def penalise(scores: torch.Tensor, in_context: torch.Tensor, penalty: float) -> torch.Tensor:
    """`scores` with every token marked in `in_context` (a boolean mask over the vocabulary)
    penalised: a negative score multiplied by `penalty`, any other divided by it."""
    penalised = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(in_context, penalised, scores)


def warp(scores: torch.Tensor, temperature: float, top_k: int | None, top_p: float) -> torch.Tensor:
    """Scores to sample from: divided by `temperature`, then all but the `top_k` best and
    outside the smallest set holding `top_p` of the probability masked out (-inf); the most
    likely token always stays."""
    scores = scores / temperature
    if top_k is not None and top_k < scores.numel():
        kth_best = torch.topk(scores, top_k).values[-1]
        scores = scores.masked_fill(scores < kth_best, -torch.inf)
    if top_p < 1.0:
        ascending, order = torch.sort(scores)
        cumulative = ascending.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - top_p
        drop[-1] = False
        scores = scores.masked_fill(drop.scatter(0, order, drop), -torch.inf)
    return scores


class TokenChooser:
    """One session's choice of each next token (its generator lives as long as the session)."""

    def __init__(self, decoding: Decoding, device: str) -> None:
        self.decoding = decoding
        self.generator: torch.Generator | None = None
        if decoding.sampled:
            self.generator = torch.Generator(device=device).manual_seed(decoding.seed)

    def choose(self, logits: torch.Tensor, in_context: torch.Tensor | None) -> int:
        """The next token from the next-token `logits` (1-D); `in_context` marks the token ids
        in context (needed with a penalty)."""
        decoding = self.decoding
        if not decoding.sampled and not decoding.penalised:
            return int(logits.argmax())
        scores = logits.float()  # as generate: the processors work in float32
        if decoding.penalised:
            assert in_context is not None, "a repetition penalty needs the context's token ids"
            scores = penalise(scores, in_context, decoding.repetition_penalty)
        if not decoding.sampled:
            return int(scores.argmax())
        warped = warp(scores, decoding.temperature, decoding.top_k, decoding.top_p)
        return int(torch.multinomial(warped.softmax(-1), 1, generator=self.generator))

"""Stage 4, the causal roll-out of Algorithm 1 (seed 002, lines 9-16).

For each segment t in order: Silent when no question is relevant at t; otherwise one
relevant question k* is picked and the model responds to it from the frames of segments
0..t only (the caller's `respond`, which sends no later frame: synth/stages.py checks it).

The rule for k* (the paper leaves it open): among the questions relevant at t, one that has
been answered least often so far, so that every question gets its turn while its evidence
lasts; a tie is broken by a draw from a random generator seeded with the run's seed and the
video's digest, so a video's trajectory does not depend on which other videos are in the
pool. Given the relevance matrix and the model's replies the roll-out is deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence

from streameval.synth.models import Action

# respond(t, k): the model's response to question k given the frames of segments 0..t.
Respond = Callable[[int, int], Awaitable[str]]


def tie_breaker(seed: int, video_digest: str) -> random.Random:
    # A string seed is hashed with SHA-512 (random.seed, version 2): stable everywhere.
    return random.Random(f"{seed}:{video_digest}")


def pick_question(relevant: Sequence[int], answered: Sequence[int], rng: random.Random) -> int:
    """k*: among the `relevant` question indices, one answered least so far (`answered[k]`
    counts the responses to k); ties broken by a draw from `rng`."""
    fewest = min(answered[k] for k in relevant)
    tied = [k for k in relevant if answered[k] == fewest]
    return rng.choice(tied)


async def roll_out(
    relevance: Sequence[Sequence[bool]], rng: random.Random, respond: Respond
) -> tuple[Action, ...]:
    """One action per segment, in order (relevance[t][k]: segment t holds evidence for k)."""
    answered = [0] * (len(relevance[0]) if relevance else 0)
    actions = []
    for t, row in enumerate(relevance):
        relevant = [k for k, holds in enumerate(row) if holds]
        if not relevant:
            actions.append(Action(segment=t, decision="silent"))
            continue
        k = pick_question(relevant, answered, rng)
        response = await respond(t, k)
        answered[k] += 1
        actions.append(Action(segment=t, decision="respond", question=k, response=response))
    return tuple(actions)

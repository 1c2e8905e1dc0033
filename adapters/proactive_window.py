"""Which received frames a proactive decision shows the model (`proactive_window`).

- `sliding`: the newest `size` frames at every decision. One frame in, one frame out, so
  consecutive prompts differ from their first image on and a prefix cache reuses nothing of
  them: every decision prefills every image of its window again.
- `append`: the last decision's window, then the frames received since. Consecutive prompts
  share the whole earlier window as their head, which a prefix cache (vLLM's
  `enable_prefix_caching`) does not prefill again. A window that would grow past `reanchor`
  images restarts (re-anchors) from the newest `size` frames, so a decision shows between
  `size` and `reanchor` images.

The prompt keeps everything that changes per call (the time, earlier responses) after the
images (chat_prompts.openai_messages), so an appended window is a prefix of the next prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from streameval.adapters.chat_prompts import PromptImage

Layout = Literal["sliding", "append"]


def next_window(
    layout: Layout,
    previous: Sequence[PromptImage],
    received: Sequence[PromptImage],
    size: int,
    reanchor: int,
) -> list[PromptImage]:
    """The frames of the next decision: `previous` is the last decision's window (empty at
    an instruction's first), `received` the frames kept, oldest first.

    An append window takes the received frames later than its last one. If that frame is no
    longer kept, at least `reanchor` frames came after it (the adapter keeps that many), so
    the window restarts anyway."""
    if layout == "append" and previous:
        last_t = previous[-1].t
        grown = [*previous, *(frame for frame in received if frame.t > last_t)]
        if len(grown) <= reanchor:
            return grown
    return list(received[-size:])

"""One session's model state: a KV cache made of segments, and what may be evicted from it.

The cache holds the conversation as a list of segments, in order, each a run of cache slots:

- `pinned`: the preamble, an instruction, a question with its answer, the first standby
  decision: never evicted;
- `frame`: one frame block (its label and vision tokens), or one video chunk block;
- `audio`: one audio block (a model that hears: the sound of a span of the stream);
- `turn`: a decision at a step (the assistant turn, the reply or wait word, the turn back).

The eviction unit is a frame or audio block together with the step decisions that followed
it (a decision with no such block before it is a unit of its own), oldest first; an eviction
takes at least its minimum of frame blocks, and the audio blocks older than them with them.
A unit is balanced ChatML (each decision closes and reopens the user turn), so what stays is
a well-formed conversation. Memory is bounded by the cache: a segment keeps its token ids (when
re-prefill or a repetition penalty needs them) and its pixel and sound tensors (re-prefill) only
while its slots are in the cache. With `track_ids` the state counts every token id in the
cache (`in_context`), the context a repetition penalty reads (adapters/hf/decoding.py).

Two ways to make room (`StreamState.make_room`):

- in place: the evicted slots leave every layer's keys and values; the kept keys keep the
  positions they were computed at, and new tokens continue after the last position (RoPE
  attention depends only on relative positions among what is kept). When the next position
  would pass `max_position` (the model's trained maximum), the gaps are closed by turning
  each kept key back by the positions evicted before it (`VisionLanguageModel.shift_positions`):
  the positions are then those the model's rule gives the compacted conversation.
  The kept keys and values were computed while the evicted tokens were still there, so
  past the first layer they are not what a fresh pass over the compacted conversation would
  compute: in place, eviction means "stop attending to these tokens".
- re-prefill: a fresh cache is computed from the kept segments' token ids and frames in one
  forward pass: exactly what the model computes over the compacted conversation, at the cost
  of every kept token again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import torch

from streameval.adapters.hf.model import Media, VisionLanguageModel

SegmentKind = Literal["pinned", "frame", "audio", "turn"]


@dataclass
class Segment:
    kind: SegmentKind
    start: int  # its first RoPE position (text position: where the rule continues from)
    end: int = 0  # the position after it
    slots: int = 0  # cache slots (tokens)
    frame_ids: tuple[str, ...] = ()
    ids: list[int] = field(default_factory=list)  # kept for re-prefill or the context's ids
    media: list[Media] = field(default_factory=list)  # kept for re-prefill only


@dataclass(frozen=True)
class Eviction:
    """What one `make_room` removed."""

    frame_ids: list[str]
    slots: int  # cache slots freed
    reprefilled: int  # tokens recomputed (0 in place)
    repositioned: bool  # the kept keys were moved to close the position gaps


class StreamState:
    """A session's KV cache, its segments and the next RoPE position.

    `reprefill` keeps every kept segment's token ids and frame tensors so the cache can be
    rebuilt; `track_ids` keeps their token ids and counts each id in the cache. Otherwise
    nothing but counts of slots is kept per segment.
    """

    def __init__(
        self,
        vlm: VisionLanguageModel,
        reprefill: bool = False,
        max_position: int | None = None,
        track_ids: bool = False,
    ) -> None:
        self._vlm = vlm
        self._cache = vlm.new_cache()
        self._next_position = 0
        self._reprefill = reprefill
        self._keep_ids = reprefill or track_ids
        # How often each token id is in the cache (a repetition penalty's context).
        self._id_counts = (
            torch.zeros(vlm.vocab_size, dtype=torch.int32, device=vlm.device) if track_ids else None
        )
        self.max_position = vlm.max_context if max_position is None else max_position
        self.segments: list[Segment] = []
        self.repositions = 0  # times the gaps were closed in place

    @property
    def length(self) -> int:
        """Tokens held in the cache."""
        return self._cache.get_seq_length()

    @property
    def next_position(self) -> int:
        return self._next_position

    @property
    def cache(self):
        return self._cache

    def in_context(self) -> torch.Tensor | None:
        """A boolean mask over the vocabulary: the token ids now in the cache (None unless
        `track_ids`)."""
        return None if self._id_counts is None else self._id_counts > 0

    def _count(self, ids: list[int], sign: int) -> None:
        if self._id_counts is not None and ids:
            index = torch.tensor(ids, device=self._id_counts.device)
            ones = torch.full((len(ids),), sign, dtype=torch.int32, device=index.device)
            self._id_counts.index_add_(0, index, ones)

    def begin(self, kind: SegmentKind, frame_ids: tuple[str, ...] = ()) -> None:
        """Start a segment: the next appends extend it."""
        self.segments.append(Segment(kind, self._next_position, self._next_position, 0, frame_ids))

    def append(self, ids: list[int], media: Media | list[Media] | None = None) -> torch.Tensor:
        """Run `ids` on top of the cache (with the pixels or sound behind their
        placeholders) and return the next-token logits, placeholders masked out (-inf): a
        generated one would have nothing behind it."""
        if not self.segments:
            self.begin("pinned")
        if self._next_position + len(ids) > self.max_position and self._has_gaps():
            self._close_gaps()
        segment = self.segments[-1]
        logits, self._next_position = self._vlm.forward(
            self._cache, self._next_position, ids, media
        )
        segment.end = self._next_position
        segment.slots += len(ids)
        if self._keep_ids:
            segment.ids.extend(ids)
            self._count(ids, 1)
        if self._reprefill:
            if isinstance(media, Media):
                segment.media.append(media)
            elif media:
                segment.media.extend(media)
        return logits.index_fill(0, self._vlm.unspeakable, -torch.inf)

    # ------------------------------------------------------------------ eviction

    def units(self) -> list[list[int]]:
        """The evictable units, oldest first: lists of segment indices."""
        units: list[list[int]] = []
        for index, segment in enumerate(self.segments):
            if segment.kind in ("frame", "audio"):
                units.append([index])
            elif segment.kind == "turn":
                previous = self.segments[index - 1].kind if index else "pinned"
                if previous == "pinned" or not units:
                    units.append([index])
                else:
                    units[-1].append(index)
        return units

    def make_room(self, incoming: int, limit: int, min_frames: int = 1) -> Eviction | None:
        """Evict the oldest units until `incoming` more tokens fit in `limit`, and at least
        `min_frames` frame blocks when any is evicted. None when nothing needed to go, or
        when evicting everything evictable would still not make room (then nothing goes)."""
        if self.length + incoming <= limit:
            return None
        chosen: list[int] = []
        freed = frames = 0
        for unit in self.units():
            if self.length - freed + incoming <= limit and frames >= min_frames:
                break
            chosen.extend(unit)
            freed += sum(self.segments[i].slots for i in unit)
            frames += sum(self.segments[i].kind == "frame" for i in unit)
        if self.length - freed + incoming > limit:
            return None
        evicted = [self.segments[i] for i in chosen]
        frame_ids = [frame_id for segment in evicted for frame_id in segment.frame_ids]
        for segment in evicted:
            self._count(segment.ids, -1)
        gone = set(chosen)
        if self._reprefill:
            self.segments = [s for i, s in enumerate(self.segments) if i not in gone]
            return Eviction(frame_ids, freed, self.rebuild(), False)
        self._drop_segments(gone)
        repositioned = self._next_position + incoming > self.max_position
        if repositioned:
            self._close_gaps()
        return Eviction(frame_ids, freed, 0, repositioned)

    def rebuild(self) -> int:
        """A fresh cache from the kept segments, in one forward pass; returns its tokens."""
        ids = [token for segment in self.segments for token in segment.ids]
        media = [item for segment in self.segments for item in segment.media]
        self._cache = self._vlm.new_cache()
        self._next_position = 0
        if ids:
            _, end = self._vlm.forward(self._cache, 0, ids, media)
            self._next_position = end
        position = 0  # each segment's positions, as the rule lays out the whole sequence
        for segment in self.segments:
            shift = position - segment.start
            segment.start += shift
            segment.end += shift
            position = segment.end
        return len(ids)

    def _drop_segments(self, chosen: set[int]) -> None:
        keep: list[torch.Tensor] = []
        offset = 0
        for index, segment in enumerate(self.segments):
            if index not in chosen:
                keep.append(torch.arange(offset, offset + segment.slots))
            offset += segment.slots
        self._vlm.keep_slots(self._cache, torch.cat(keep) if keep else torch.empty(0).long())
        self.segments = [s for i, s in enumerate(self.segments) if i not in chosen]

    def _has_gaps(self) -> bool:
        position = 0
        for segment in self.segments:
            if segment.start != position:
                return True
            position = segment.end
        return False

    def _close_gaps(self) -> None:
        """Move every kept segment down to where the previous one ends (in place)."""
        deltas: list[torch.Tensor] = []
        position = 0
        for segment in self.segments:
            shift = position - segment.start
            deltas.append(torch.full((segment.slots,), shift, dtype=torch.long))
            segment.start += shift
            segment.end += shift
            position = segment.end
        if any(bool(d.any()) for d in deltas):
            self._vlm.shift_positions(self._cache, torch.cat(deltas))
            self.repositions += 1
        self._next_position = position

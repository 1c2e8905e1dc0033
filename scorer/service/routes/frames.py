"""A record's video frames from the run's frame cache: the index of its samples and one
sample as a JPEG thumbnail. Neither names a file on the server."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from fastapi.responses import Response

from streameval.scorer.service.dashboard.frames import FrameIndex, FramesUnavailable, thumbnail
from streameval.scorer.service.routes.records import stored_record
from streameval.scorer.service.routes.state import FramesDep, StoreDep

router = APIRouter(tags=["frames"])
SampleIndex = Annotated[int, Path(ge=0, description="sample index (t = index / fps)")]
ThumbnailWidth = Annotated[int, Query(ge=16, le=960, description="maximum width in pixels")]
JPEG_RESPONSE = {
    "description": "a JPEG thumbnail",
    "content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}},
}


def _unavailable(index: int, record_id: str) -> HTTPException:
    return HTTPException(404, f"frame {index} of record {record_id!r} is not available")


@router.get("/runs/{run_id}/records/{record_id}/frames", response_model=FrameIndex)
def frame_index(run_id: str, record_id: str, store: StoreDep, frames: FramesDep) -> FrameIndex:
    """The video's samples in the run's frame cache, or why they are not available here."""
    stored_record(store, run_id, record_id)  # 404 for a record the run does not have
    return frames.index(run_id, record_id)


@router.get(
    "/runs/{run_id}/records/{record_id}/frames/{index}",
    response_class=Response,
    responses={200: JPEG_RESPONSE},
)
def frame(
    run_id: str,
    record_id: str,
    index: SampleIndex,
    store: StoreDep,
    frames: FramesDep,
    width: ThumbnailWidth = 160,
) -> Response:
    """One sampled frame as the model saw it, scaled down to `width`."""
    stored_record(store, run_id, record_id)  # 404 for a record the run does not have
    try:
        video = frames.video_frames(run_id, record_id)
    except FramesUnavailable:
        # The reason names files on the server (the video, the cache): the frame
        # index (`/frames`) gives it; a frame request only says that it is missing.
        raise _unavailable(index, record_id) from None
    if not index < len(video.frames):
        raise HTTPException(404, f"no frame {index}: the video has {len(video.frames)} samples")
    try:
        jpeg = thumbnail(video, index, width)
    except FramesUnavailable:  # a cached sample that cannot be read: named by its path
        raise _unavailable(index, record_id) from None
    # Cache entries are content-addressed: a frame never changes.
    headers = {"Cache-Control": "max-age=86400, immutable"}
    return Response(jpeg, media_type="image/jpeg", headers=headers)

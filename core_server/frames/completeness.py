"""Whether a video decoded as long as its video stream declares, and if not, why: a file
that ends early is truncated, a file whose stream stops while the missing seconds' bytes are
still there is corrupt (a Matroska demuxer gives up at damaged bytes and reports nothing).

The margin is fixed, whatever the video's length: a stream decodes to within a frame or two
of the duration its header declares, so a shortfall past TRUNCATION_MARGIN_S means frames
are missing, in a 10-second clip as in a 1-hour film, and the error names the seconds lost.
"""

from __future__ import annotations

from pathlib import Path

import av

from streameval.core.frames.errors import VideoDecodeError
from streameval.core.frames.probing import open_video
from streameval.core.frames.types import VideoInfo

TRUNCATION_MARGIN_S = 1.0
# The stream stopped with at least this share of the bytes its missing seconds would take
# (at the rate of what decoded) still in the file after its last packet: the data is there
# but unreadable. A truncated file has at most a partly written packet or cluster left.
UNREAD_SHARE_OF_MISSING = 0.5


def check_complete(path: Path, decoded_s: float, info: VideoInfo) -> None:
    """VideoDecodeError when the decoded stream ends more than TRUNCATION_MARGIN_S before the
    duration its header declares: "truncated video" or "corrupt video data"."""
    if info.duration_source != "stream":
        return  # measured from what is there: nothing declared to fall short of
    declared_s = info.duration_s
    missing_s = declared_s - decoded_s
    if missing_s <= TRUNCATION_MARGIN_S:
        return
    read, size = _bytes_read(path), path.stat().st_size
    rate = read / decoded_s if decoded_s > 0 else 0.0
    declared = f"{decoded_s:.2f}s of the {declared_s:.2f}s its header declares"
    if size - read >= UNREAD_SHARE_OF_MISSING * missing_s * rate > 0:
        raise VideoDecodeError(
            f"{path}: corrupt video data: the stream stops at {declared}, with "
            f"{size - read} bytes of the file unread"
        )
    raise VideoDecodeError(
        f"{path}: truncated video: decoded {declared}, {missing_s:.2f}s missing "
        "(the file ends early)"
    )


def _bytes_read(path: Path) -> int:
    """How far into the file the demuxer got: the end of the last packet of any stream."""
    end = 0
    with open_video(path) as container:
        try:
            for packet in container.demux():
                if packet.size and packet.pos is not None and packet.pos >= 0:
                    end = max(end, packet.pos + packet.size)
        except av.FFmpegError:
            pass  # where it stopped is the answer
    return end

"""The frame pipeline: a video's samples decoded once, turned upright, resized, JPEG-encoded
and cached on disk under the video's content digest, so every session of every run reads
the same files.

cache.py (`FrameCache`, open it first) finds or builds a video's entry (entries.py: the
folder, its index, publishing it whole). A video is known by its content digest (digest.py)
and its stream's facts (probing.py); timing.py says which source frame each sample shows,
planning.py which packets hold them, decoding.py and sampling.py decode just those,
completeness.py tells a truncated or corrupt stream from a whole one, and jpeg_writer.py
resizes, encodes and writes each sample. audio_track.py does the same for the sound: decoded
once to 16-bit mono PCM, cached beside the frames, cut into the chunks a session streams.
types.py and errors.py hold what the other rooms import.

May import: errors.
"""

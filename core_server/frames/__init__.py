"""The frame pipeline: a video's samples decoded once, turned upright, resized, JPEG-encoded
and cached on disk under the video's content digest, so every session of every run reads
the same files.

May import: errors.
"""

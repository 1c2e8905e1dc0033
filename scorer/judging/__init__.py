"""Judges of response content (judges.py: exact match and an LLM judge under this project's
rules; trace_judge.py: TRACE's judge rules) and the LLM judge's verdict cache, a SQLite file
in the cache directory (cache.py).

May import: errors, parsing.
"""

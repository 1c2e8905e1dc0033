"""Judges of response content (judges.py: exact match and an LLM judge) and the LLM judge's
verdict cache in the store (cache.py)."""

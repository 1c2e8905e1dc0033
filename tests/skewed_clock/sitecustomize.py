"""Imported at start-up by a Python whose PYTHONPATH names this folder: `datetime.now()` and
`datetime.utcnow()` say the time shifted by STREAMEVAL_TEST_CLOCK_SKEW_S seconds, as if the
host's clock had been stepped (what libfaketime does to one process, without a preload).

Every module imported afterwards that takes `datetime` from the `datetime` module gets the
skewed class; the database server's clock is left alone."""

import datetime as _datetime
import os

_SKEW = _datetime.timedelta(seconds=float(os.environ.get("STREAMEVAL_TEST_CLOCK_SKEW_S", "0")))


class _SkewedDatetime(_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return super().now(tz) + _SKEW

    @classmethod
    def utcnow(cls):
        return super().utcnow() + _SKEW


_datetime.datetime = _SkewedDatetime

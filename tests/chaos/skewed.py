"""``pgq`` with the wall clock skewed by ``CHAOS_CLOCK_SKEW`` seconds (may be negative):

    CHAOS_CLOCK_SKEW=86400 python -m tests.chaos.skewed work tests.chaos.chaos_app:pgq ...

``time.time``/``time.time_ns`` and ``datetime.now``/``utcnow``/``today`` are shifted before
pgqueue is imported; the monotonic clock (intervals, timeouts) is not, as with a host whose
clock is set wrong. pgqueue takes every job time from the database, so this must not matter.
"""

from __future__ import annotations

import datetime as _datetime
import os
import sys
import time
from typing import Any

SKEW = float(os.environ.get("CHAOS_CLOCK_SKEW", "0"))
_real_time = time.time
_real_time_ns = time.time_ns


def _time() -> float:
    return _real_time() + SKEW


def _time_ns() -> int:
    return _real_time_ns() + int(SKEW * 1e9)


class _SkewedDatetime(_datetime.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return _datetime.datetime.fromtimestamp(_time(), tz)

    @classmethod
    def utcnow(cls) -> Any:
        return _datetime.datetime.fromtimestamp(_time(), _datetime.UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> Any:
        return cls.now()


def install() -> None:
    time.time = _time
    time.time_ns = _time_ns
    _datetime.datetime = _SkewedDatetime  # type: ignore[misc]


if __name__ == "__main__":
    install()
    from pgqueue.cli import main

    sys.argv = ["pgq", *sys.argv[1:]]
    main()

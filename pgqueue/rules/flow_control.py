"""Flow control rules: rate limits, circuit breakers, and the limits a queue or task can have.

Pure values, checked where they are made; the plans that read and write them are in
:mod:`pgqueue.db.flow_plans`. Every limit lives in PostgreSQL (``pgqueue.queues``,
``pgqueue.task_limits``, ``pgqueue.circuit_breakers``) and is enforced by the claim
(``pgqueue.claim``), so it holds across every worker. Task limits and breakers can be declared
on the task (``@pgq.task(...)``; workers write them at start-up) or set by operators
(``pgq.flow.configure_task``, ``pgq task set``). Queue settings are set by operators
(``pgq.flow.configure_queue``, ``pgq queue set``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final, NamedTuple, TypedDict

from pgqueue.errors import ConfigurationError


class Unset:
    """The type of :data:`UNSET`."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset()
"""The default of ``configure_queue``/``configure_task`` settings: "leave this setting as it is"
(``None`` clears a setting)."""

_PERIODS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0,
            "h": 3600.0, "hour": 3600.0}  # fmt: skip
_RATE = re.compile(r"^\s*(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<period>[a-z]+)\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A token bucket: ``rate`` jobs started per second on average, bursts of ``burst``.

    ``RateLimit.parse("20/s")`` (or ``"100/m"``, ``"5/h"``): the burst defaults to one period's
    worth (20, 100, 5).
    """

    rate: float
    burst: float | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.rate, int | float) and math.isfinite(self.rate) and self.rate > 0):
            raise ConfigurationError(f"a rate limit must be a positive number, got {self.rate!r}")
        if self.burst is not None and not (
            isinstance(self.burst, int | float) and math.isfinite(self.burst) and self.burst >= 1
        ):
            raise ConfigurationError(f"a rate limit's burst must be at least 1, got {self.burst!r}")

    @property
    def bucket(self) -> float:
        """The bucket size actually used (at least one token)."""
        return float(self.burst) if self.burst is not None else max(1.0, self.rate)

    @classmethod
    def parse(cls, value: str | float | RateLimit, burst: float | None = None) -> RateLimit:
        """A rate limit from ``"20/s"``, ``"100/m"``, ``"5/h"``, a number (per second) or a
        ``RateLimit``; ``burst`` overrides its bucket size. Raises
        :class:`~pgqueue.ConfigurationError` for anything else."""
        if isinstance(value, RateLimit):
            return value if burst is None else cls(value.rate, burst)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return cls(float(value), burst)
        if isinstance(value, str):
            match = _RATE.match(value.lower())
            if match and match.group("period") in _PERIODS:
                count = float(match.group("count"))
                period = _PERIODS[match.group("period")]
                return cls(count / period, burst if burst is not None else max(1.0, count))
        raise ConfigurationError(
            f"invalid rate limit {value!r}: use e.g. '20/s', '100/m', '5/h' or a RateLimit"
        )

    def __str__(self) -> str:
        return f"{self.rate:g}/s (burst {self.bucket:g})"


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """Stop claiming a task while it keeps failing.

    When at least ``min_calls`` attempts finished within the current ``window`` (seconds) and the
    share of failures reaches ``failure_threshold``, the breaker opens: workers leave the task's
    jobs waiting for ``cooldown`` seconds. Then one probe job runs (half-open): success closes
    the breaker, failure opens it for another cooldown.
    """

    failure_threshold: float = 0.5
    min_calls: int = 10
    window: float = 60.0
    cooldown: float = 30.0

    def __post_init__(self) -> None:
        if not 0 < self.failure_threshold <= 1:
            raise ConfigurationError(
                f"failure_threshold must be in (0, 1], got {self.failure_threshold!r}"
            )
        if not isinstance(self.min_calls, int) or self.min_calls < 1:
            raise ConfigurationError(f"min_calls must be at least 1, got {self.min_calls!r}")
        for name in ("window", "cooldown"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigurationError(f"{name} must be a positive number of seconds")


def check_limit(value: object, what: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{what} must be a positive integer or None, got {value!r}")
    return value


class QueueChanges(TypedDict, total=False):
    """A queue's flow-control settings, for ``pgq.flow.configure_queue``: a setting left out
    (or :data:`UNSET`) stays as it is, ``None`` clears it."""

    weight: int | Unset | None
    """Its fair share of a worker's slots against the other queues'."""
    max_depth: int | Unset | None
    """Refuse enqueues beyond this many waiting jobs (backpressure)."""
    concurrency_limit: int | Unset | None
    """Its jobs running at once, fleet-wide."""
    rate_limit: str | float | RateLimit | Unset | None
    """Its jobs started per second, fleet-wide (``"20/s"``)."""
    fair: bool | Unset | None
    """Serve its keys (jobs' ``concurrency_key``) round-robin instead of first come, first
    served (None: False)."""


class TaskLimitChanges(TypedDict, total=False):
    """A task's limits, for ``pgq.flow.configure_task``: a limit left out (or :data:`UNSET`)
    stays as it is, ``None`` clears it."""

    concurrency_limit: int | Unset | None
    """Its jobs running at once, fleet-wide."""
    key_limit: int | Unset | None
    """Its running jobs per key (``concurrency_key``) (None: no limit per key)."""
    rate_limit: str | float | RateLimit | Unset | None
    """Its jobs started per second, fleet-wide (``"20/s"``)."""
    key_rate_limit: str | float | RateLimit | Unset | None
    """Its jobs started per second per key, fleet-wide (``"10/s"``)."""


class DeclaredLimits(NamedTuple):
    """What a task's code declares (``key_limit`` None: no limit per key)."""

    concurrency_limit: int | None
    key_limit: int | None
    rate_limit: RateLimit | None
    key_rate_limit: RateLimit | None = None

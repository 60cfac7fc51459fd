"""Retry backoff policies: pure functions of the attempt number.

The default is exponential backoff with *full jitter* (``uniform(0, min(cap, base * 2**attempt))``):
retries of jobs that failed together spread over the whole window instead of arriving in waves,
which is what stops a recovering dependency from being knocked over again by its own backlog.
"""

from __future__ import annotations

import inspect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from pgqueue.errors import ConfigurationError

# 2**62 seconds is already far beyond any sensible cap; clamping keeps the float finite.
_MAX_EXPONENT = 62


class Backoff(Protocol):
    """Seconds to wait before the next attempt, given how many attempts have run so far."""

    def __call__(self, attempt: int) -> float: ...


@dataclass(frozen=True)
class ExponentialBackoff:
    """Full-jitter exponential backoff: ``uniform(0, min(cap, base * 2**attempt))`` seconds."""

    base: float = 1.0
    cap: float = 3600.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base) and self.base > 0):
            raise ValueError(f"backoff base must be a positive number of seconds, got {self.base}")
        if not (math.isfinite(self.cap) and self.cap >= self.base):
            raise ValueError(f"backoff cap must be at least base ({self.base}), got {self.cap}")

    def ceiling(self, attempt: int) -> float:
        """The upper end of the jitter window after ``attempt`` attempts."""
        return min(self.cap, self.base * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT))

    def __call__(self, attempt: int) -> float:
        return self.rng.uniform(0.0, self.ceiling(attempt))


@dataclass(frozen=True)
class ConstantBackoff:
    """The same delay before every retry (no jitter); mostly for tests and polling-style jobs."""

    seconds: float

    def __call__(self, attempt: int) -> float:
        return self.seconds


#: What ``backoff=`` accepts: a policy above, or any callable of the attempt number (or of the
#: attempt number and the exception) returning seconds or a ``timedelta``.
BackoffLike = Backoff | Callable[[int], float | timedelta] | Callable[[int, BaseException], Any]


def _takes_error(func: Callable[..., Any]) -> bool:
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


ExceptionClasses = tuple[type[BaseException], ...]


def _classes(value: object, what: str) -> ExceptionClasses:
    items = value if isinstance(value, tuple | list | set | frozenset) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(f"{what} must be exception classes, got {item!r}")
    return tuple(items)


@dataclass(frozen=True)
class RetryPolicy:
    """Which failures are retried, and after how long.

    An exception matching ``no_retry_on`` is never retried (the job is dead-lettered at once);
    otherwise it is retried if it matches ``retry_on`` (default: every ``Exception``) and
    attempts remain. ``backoff`` gives the delay before the next attempt.
    """

    retry_on: ExceptionClasses = (Exception,)
    no_retry_on: ExceptionClasses = ()
    backoff: BackoffLike = field(default_factory=ExponentialBackoff)

    @classmethod
    def build(
        cls, retry_on: object = None, no_retry_on: object = None, backoff: object = None
    ) -> RetryPolicy:
        """A policy from a task's ``retry_on``, ``no_retry_on`` and ``backoff`` options (None: the
        default), checking their types; raises :class:`~pgqueue.ConfigurationError`."""
        if backoff is not None and not callable(backoff):
            raise ConfigurationError(f"backoff must be callable, got {backoff!r}")
        return cls(
            retry_on=_classes(retry_on, "retry_on") if retry_on is not None else (Exception,),
            no_retry_on=_classes(no_retry_on, "no_retry_on") if no_retry_on is not None else (),
            backoff=backoff if backoff is not None else ExponentialBackoff(),
        )

    def retryable(self, error: BaseException) -> bool:
        """Whether ``error`` may be retried: an instance of ``retry_on`` and not of
        ``no_retry_on``."""
        return not isinstance(error, self.no_retry_on) and isinstance(error, self.retry_on)

    def delay(self, attempt: int, error: BaseException | None = None) -> float:
        """Seconds before the next attempt, never negative."""
        func: Callable[..., Any] = self.backoff
        value = func(attempt, error) if _takes_error(func) else func(attempt)
        seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
        if not math.isfinite(seconds):
            raise ConfigurationError(f"backoff returned {value!r}, not a finite delay")
        return max(0.0, seconds)

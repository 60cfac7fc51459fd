"""Retry backoff policies: pure functions of the attempt number.

The default is exponential backoff with *full jitter* (``uniform(0, min(cap, base * 2**attempt))``):
retries of jobs that failed together spread over the whole window instead of arriving in waves,
which is what stops a recovering dependency from being knocked over again by its own backlog.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Protocol

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

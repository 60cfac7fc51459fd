"""Human durations for the CLI and settings: 250ms, 30s, 5m, 2h, 1d, or plain seconds."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d)?\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; raises ValueError with the accepted forms on anything else."""
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(
            f"invalid duration {text!r}: use a number of seconds or a number with a unit "
            "(ms, s, m, h, d), e.g. 30s or 5m"
        )
    seconds = float(match.group("number")) * _UNITS[match.group("unit") or "s"]
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {text!r}: too large")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.1f}s".replace(".0s", "s")
    if seconds < 7200:
        return f"{seconds / 60:.1f}m".replace(".0m", "m")
    return f"{seconds / 3600:.1f}h".replace(".0h", "h")


def check_timeout(timeout: object) -> float | None:
    """A waiter's ``timeout``: None (wait for ever) or a number of seconds, not negative.
    NaN is refused too: it compares false with every time, so a wait would never end."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout):
        raise ValueError(f"timeout must be a number of seconds or None, got {timeout!r:.40}")
    if timeout < 0:
        raise ValueError(f"timeout must not be negative, got {timeout!r}")
    return float(timeout)

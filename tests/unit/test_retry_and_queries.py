from __future__ import annotations

import random

import pytest

from pgqueue.db.queries import parse
from pgqueue.rules.retry import ConstantBackoff, ExponentialBackoff


def test_full_jitter_stays_inside_the_window_and_covers_it():
    backoff = ExponentialBackoff(base=1.0, cap=60.0, rng=random.Random(7))
    for attempt in range(1, 12):
        ceiling = min(60.0, 2.0**attempt)
        samples = [backoff(attempt) for _ in range(2000)]
        assert all(0.0 <= s <= ceiling for s in samples)
        # full jitter: spread over the whole window, not clustered at the top
        assert min(samples) < 0.05 * ceiling
        assert max(samples) > 0.95 * ceiling
        assert abs(sum(samples) / len(samples) - ceiling / 2) < 0.1 * ceiling


def test_cap_holds_for_huge_attempt_numbers():
    backoff = ExponentialBackoff(base=2.0, cap=30.0)
    assert backoff.ceiling(10_000) == 30.0
    assert backoff.ceiling(0) == 2.0


def test_bad_backoff_settings():
    with pytest.raises(ValueError, match="base"):
        ExponentialBackoff(base=0)
    with pytest.raises(ValueError, match="cap"):
        ExponentialBackoff(base=10, cap=5)


def test_constant_backoff():
    assert ConstantBackoff(3)(99) == 3


def test_named_queries_parse_and_are_unique():
    parsed = parse("-- name: a\nSELECT 1;\n-- comment\n-- name: b\nSELECT 2\n")
    assert parsed == {"a": "SELECT 1", "b": "SELECT 2"}
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")

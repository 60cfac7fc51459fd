"""The limited-task benchmark's figure: the share of a limit's places in use while jobs wait."""

from __future__ import annotations

import pytest

from benchmarks.limited import places_in_use


def test_places_in_use_counts_running_time_over_places_until_the_last_start():
    # One place; jobs of 0.2 s, each started 0.05 s after the previous one ended: the last job
    # starts at 0.5 s, and of those 0.5 s the place was busy 0.4 s.
    rows = [
        (1, "start", 0.0, 10),
        (1, "end", 0.2, 10),
        (2, "start", 0.25, 11),
        (2, "end", 0.45, 11),
        (3, "start", 0.5, 10),
        (3, "end", 0.7, 10),
    ]
    figures = places_in_use(rows, 1)
    assert figures["used"] == pytest.approx(0.8)
    assert figures["wall"] == pytest.approx(0.7)
    assert figures["ideal"] == pytest.approx(0.6)
    assert figures["processes"] == [1, 2]


def test_places_in_use_with_two_places_half_idle():
    # Two places, only one ever used.
    rows = [(1, "start", 0.0, 1), (1, "end", 1.0, 1), (2, "start", 1.0, 1), (2, "end", 2.0, 1)]
    assert places_in_use(rows, 2)["used"] == pytest.approx(0.5)

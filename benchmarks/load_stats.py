"""Figures of the steady-load and mixed workloads, from what the handlers and the sampler wrote
(pure functions: tested without any queue running)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass
class Delays:
    """Enqueue -> start (``sent``) and due -> start (``due``) delays, in seconds."""

    sent: list[float]
    due: list[float]


def parse_latency(lines: Iterable[str]) -> Delays:
    """Lines of ``$BENCH_LATENCY_FILE``: ``SECONDS`` (from ``sent``) or ``d SECONDS`` (from
    ``due``). A line cut short by a process killed mid-write is skipped."""
    sent: list[float] = []
    due: list[float] = []
    for line in lines:
        parts = line.split()
        try:
            if len(parts) == 1:
                sent.append(float(parts[0]))
            elif len(parts) == 2 and parts[0] == "d":
                due.append(float(parts[1]))
        except ValueError:
            continue
    return Delays(sent, due)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values`` (NaN if empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    # (rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in floating point)
    rank = max(1, math.ceil(round(q / 100 * len(ordered), 9)))
    return ordered[min(rank, len(ordered)) - 1]


def slope(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of ``(time, value)`` samples: how fast a backlog grows (per second;
    0 with fewer than two distinct times)."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in samples) / spread


@dataclass
class Backlog:
    growth: float  # jobs/s, least squares over the window
    peak: int  # the largest sample


def backlog(samples: Sequence[tuple[float, float]], skip: float = 1.0) -> Backlog:
    """Growth and peak of the due-and-unfinished job count sampled while producers ran,
    leaving out the first ``skip`` seconds (workers and producers settling)."""
    if not samples:
        return Backlog(0.0, 0)
    start = samples[0][0] + skip
    kept = [s for s in samples if s[0] >= start] or list(samples)
    return Backlog(slope(kept), int(max(v for _, v in samples)))


def middle_rate(
    bucket_maps: Iterable[dict[str, int] | dict[int, int]], low: float = 0.1, high: float = 0.9
) -> float | None:
    """Jobs/s between the 100 ms buckets where ``low`` and ``high`` of all jobs had started,
    over every process's buckets (``JobStats.buckets``): a drain's rate without its ramp-up
    (workers still starting, pools opening) and its tail. None without buckets."""
    merged: dict[int, int] = {}
    for buckets in bucket_maps:
        for key, count in buckets.items():
            merged[int(key)] = merged.get(int(key), 0) + count
    total = sum(merged.values())
    if not total:
        return None
    keys = sorted(merged)
    cumulative = 0
    first = last = None
    before_first = 0
    for key in keys:
        if first is None and cumulative + merged[key] >= low * total:
            first, before_first = key, cumulative
        cumulative += merged[key]
        if cumulative >= high * total:
            last = key
            break
    assert first is not None and last is not None
    return (cumulative - before_first) / ((last - first + 1) / 10)

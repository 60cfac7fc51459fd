"""Pure pieces of the comparison's new workloads: latency lines, percentiles, backlog growth,
the drain rate without its ramps, scheduled due times, the private Redis's wire format and
the workload filter (no queue, database or Redis runs here)."""

from __future__ import annotations

import io
import math

import pytest

from benchmarks import load_stats, redis_server
from benchmarks.compare import FULL, Harness, Results, real_workloads
from benchmarks.drivers import protocol


def test_latency_lines_split_into_sent_and_due_and_skip_torn_lines():
    delays = load_stats.parse_latency(["0.001500", "d 0.250000", "0.00", "d", "x y z", "0.0o1", ""])
    assert delays.sent == [0.0015, 0.0]
    assert delays.due == [0.25]


def test_nearest_rank_percentiles():
    values = list(range(1, 1001))  # 1 .. 1000
    assert load_stats.percentile(values, 50) == 500
    assert load_stats.percentile(values, 99) == 990
    assert load_stats.percentile(values, 99.9) == 999
    assert load_stats.percentile([7.0], 99.9) == 7.0
    assert math.isnan(load_stats.percentile([], 50))


def test_backlog_growth_is_the_least_squares_slope_after_the_settling_second():
    # Flat at 10 during the first second (left out), then growing 50 jobs/s.
    samples = [(0.0, 10.0), (0.5, 10.0)] + [(1 + t / 4, 20 + 50 * t / 4) for t in range(12)]
    grown = load_stats.backlog(samples)
    assert grown.growth == pytest.approx(50)
    assert grown.peak == int(20 + 50 * 11 / 4)
    flat = load_stats.backlog([(t / 4, 3.0) for t in range(20)])
    assert flat.growth == pytest.approx(0) and flat.peak == 3
    assert load_stats.backlog([]).peak == 0


def test_middle_rate_leaves_out_ramp_up_and_tail():
    # Two processes: a slow first second (10 jobs per 100 ms), then 100 jobs per 100 ms each
    # for 2 s, then a trickle. The rate between 10% and 90% of the starts is the steady one.
    def process(offset: int) -> dict[str, int]:
        buckets = {offset + i: 10 for i in range(10)}
        buckets.update({offset + 10 + i: 100 for i in range(20)})
        buckets.update({offset + 30 + i: 1 for i in range(10)})
        return {str(k): v for k, v in buckets.items()}

    rate = load_stats.middle_rate([process(1000), process(1000)])
    assert rate == pytest.approx(2000, rel=0.1)
    assert load_stats.middle_rate([{}]) is None


def test_due_batches_cover_the_window_evenly_in_order():
    batches = list(protocol.due_batches(10, 100.0, 5.0, chunk=4))
    assert [len(b) for b in batches] == [4, 4, 2]
    flat = [d for b in batches for d in b]
    assert flat == pytest.approx([100.0 + i * 0.5 for i in range(10)])


def test_redis_wire_format_round_trips():
    assert redis_server.encode("SELECT", 3) == b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n"
    replies = io.BytesIO(b"+OK\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$1\r\nx\r\n-ERR no\r\n")
    assert redis_server.parse(replies) == "OK"
    assert redis_server.parse(replies) == 42
    assert redis_server.parse(replies) == b"abc"
    assert redis_server.parse(replies) is None
    assert redis_server.parse(replies) == [1, b"x"]
    with pytest.raises(redis_server.RedisError, match="ERR no"):
        redis_server.parse(replies)


def test_workload_groups_select_their_rows():
    harness = Harness("dsn", FULL, tmp=None, results=Results(), count_statements=False)  # type: ignore[arg-type]
    harness.only = {"steady", "row"}
    keys = [w.key for w in real_workloads(FULL)]
    chosen = [k for k in keys if harness.wanted(k)]
    assert "row" in chosen and "steady_5000_p999" in chosen and "steady_2000_growth" in chosen
    assert not [k for k in chosen if k.startswith(("io_", "mixed"))]

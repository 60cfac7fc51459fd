"""The lease clock: how long a lease surely holds, from the claim and the heartbeats."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker.completer import _first_try_committed
from pgqueue.worker.leases import LeaseClock
from pgqueue.worker.outcome import Outcome

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def job(leased_at: float, job_id: int = 1, token: int = 1) -> ClaimedJob:
    row: tuple[Any, ...] = (
        *(job_id, "default", "t", {}, 1, 3, token, 0, NOW, NOW, False),
        *(None, None, None),  # meta, tags, last_trace
    )
    return ClaimedJob.from_row(row, leased_at)


def test_a_claim_holds_for_one_lease_from_when_it_was_sent():
    clock = LeaseClock(lease=10.0)
    assert clock.surely_held(job(100.0), now=109.9)
    assert not clock.surely_held(job(100.0), now=110.0)


def test_a_heartbeat_extends_only_the_pairs_it_extended():
    clock = LeaseClock(lease=10.0)
    clock.beat(105.0, [(1, 1)])
    assert clock.surely_held(job(100.0), now=114.9)
    assert not clock.surely_held(job(100.0), now=115.0)
    # Another token of the same job (claimed again elsewhere) was not extended.
    assert not clock.surely_held(job(100.0, token=2), now=112.0)
    # The next beat no longer holds the pair: only the claim time counts again.
    clock.beat(108.0, [])
    assert not clock.surely_held(job(100.0), now=112.0)


def test_a_job_not_claimed_here_is_never_surely_held():
    assert not LeaseClock(lease=10.0).surely_held(job(0.0), now=1.0)


@pytest.mark.parametrize(
    ("kind", "row", "verdict"),
    [
        ("ack", None, True),  # the ack deleted it
        ("ack", (5, "running"), None),  # still there under this token: not acked
        ("ack", (5, "ready"), None),  # reaped: the lease was lost
        ("ack", (6, "running"), None),  # claimed again by someone else
        ("ack", (4, "ready"), False),  # the database lost this claim (a failover)
        ("error", None, True),  # dead-lettered
        ("error", (5, "scheduled"), True),  # rescheduled by the first try
        ("error", (6, "running"), True),  # rescheduled, then claimed again
        ("error", (5, "running"), None),  # untouched: the first try did not commit
        ("retry", (4, "ready"), False),
    ],
)
def test_what_the_row_says_of_a_retried_writes_first_try(kind, row, verdict):
    outcome = Outcome(job(1.0, token=5), kind)
    assert _first_try_committed(outcome, row) is verdict

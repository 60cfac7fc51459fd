"""When a fetcher that ran short of work polls instead of registering for a NOTIFY."""

from __future__ import annotations

from pgqueue.worker.linger import Linger


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_short_claim_alone_does_not_linger():
    linger = Linger(Clock())
    linger.claimed(3, full=False)  # a trickle: the NOTIFY path wakes this worker sooner
    assert not linger.active


def test_a_full_claim_lingers_until_no_claim_found_a_job_for_the_window():
    clock = Clock()
    linger = Linger(clock)
    linger.claimed(64, full=True)
    assert linger.active
    assert linger.interval == Linger.first
    clock.now += Linger.window / 2
    linger.claimed(1, full=False)  # found one: the window starts again
    clock.now += Linger.window * 0.9
    linger.claimed(0, full=False)
    assert linger.active
    clock.now += Linger.window * 0.1
    assert not linger.active  # a whole window without a job: register for notifications


def test_the_poll_interval_doubles_while_claims_find_nothing_and_resets_when_one_does():
    clock = Clock()
    linger = Linger(clock)
    linger.claimed(8, full=True)
    intervals = []
    for _ in range(8):
        linger.claimed(0, full=False)
        intervals.append(linger.interval)
    assert intervals[:3] == [2 * Linger.first, 4 * Linger.first, 8 * Linger.first]
    assert intervals[-1] == Linger.cap
    linger.claimed(2, full=False)
    assert linger.interval == Linger.first


def test_lingering_starts_over_at_the_first_interval():
    clock = Clock()
    linger = Linger(clock)
    linger.claimed(8, full=True)
    for _ in range(8):
        linger.claimed(0, full=False)
    clock.now += Linger.window
    assert not linger.active
    linger.claimed(8, full=True)
    assert linger.interval == Linger.first


def fast_notifications(linger: Linger, clock: Clock, pids: list[int]) -> None:
    for i in range(Linger.notify_count):
        clock.now += 0.5 / Linger.notify_rate
        linger.notified(pids[i % len(pids)])


def test_fast_notifications_from_several_producers_linger():
    clock = Clock()
    linger = Linger(clock)
    fast_notifications(linger, clock, [101, 102, 103])
    assert linger.active


def test_a_single_producer_keeps_the_notify_path_at_any_rate():
    # Nobody else's notifying commit makes it wait: its NOTIFYs cost it nothing more.
    clock = Clock()
    linger = Linger(clock)
    fast_notifications(linger, clock, [101])
    assert not linger.active


def test_notifications_below_the_rate_keep_the_notify_path():
    clock = Clock()
    linger = Linger(clock)
    for i in range(3 * Linger.notify_count):
        clock.now += 2 / Linger.notify_rate
        linger.notified(100 + i % 4)
    assert not linger.active

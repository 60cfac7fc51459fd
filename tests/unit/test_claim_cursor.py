"""Where the worker's next claim starts its walk of the ready index."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pgqueue.worker.claim_cursor import ClaimCursor

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TOP = {"after_priority": [None, None], "after_run_at": [None, None], "after_id": [None, None]}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(job_id: int, queue: str, priority: int = 0, seconds: float = 0.0) -> tuple[object, ...]:
    # The claim_jobs row layout: id, queue, task, args, attempts, max_attempts, lease_token,
    # priority, created_at, run_at, wants_result.
    run_at = T0 + timedelta(seconds=seconds)
    return (job_id, queue, "t", {}, 1, 5, 1, priority, run_at, run_at, False)


def test_the_first_claim_walks_from_the_top():
    assert ClaimCursor(["a", "b"], clock=Clock()).params() == TOP


def test_a_full_claim_moves_each_queue_past_the_largest_key_it_took():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock)
    cursor.params()
    cursor.claimed([row(3, "a", 0, 1), row(9, "a", 0, 2), row(1, "a", 1, 0), row(4, "b")], True)
    assert cursor.params() == {
        "after_priority": [1, 0],
        "after_run_at": [T0, T0],
        "after_id": [1, 4],
    }


def test_a_queue_without_jobs_in_the_claim_keeps_its_place():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock)
    cursor.params()
    cursor.claimed([row(1, "a"), row(2, "b")], True)
    cursor.claimed([row(5, "a")], True)
    assert cursor.params()["after_id"] == [5, 2]


def test_a_short_claim_sends_the_next_one_back_to_the_top():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock)
    cursor.params()
    cursor.claimed([row(1, "a")], True)
    cursor.claimed([row(2, "a")], False)
    assert cursor.params() == TOP


def test_the_top_is_walked_again_after_the_rescan_interval_while_claims_stay_full():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], rescan=0.25, clock=clock)
    cursor.params()
    cursor.claimed([row(1, "a")], True)
    clock.now += 0.2
    assert cursor.params()["after_id"] == [1, None]
    cursor.claimed([row(2, "a")], True)
    clock.now += 0.1  # 0.3 s since the last walk from the top
    assert cursor.params() == TOP
    cursor.claimed([row(3, "a")], True)
    clock.now += 0.2  # counted from that walk
    assert cursor.params()["after_id"] == [3, None]


def test_a_row_whose_run_at_could_not_be_read_sends_the_next_claim_to_the_top():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock)
    cursor.params()
    broken: tuple[object, ...] = (7, "a", "t", {}, 1, 5, 1, 0, T0, "infinity", False)
    cursor.claimed([row(1, "a"), broken], True)
    assert cursor.params() == TOP


def test_one_queue_takes_the_largest_key_of_a_claim():
    cursor = ClaimCursor(["a"], clock=Clock())
    cursor.params()
    cursor.claimed([row(3, "a", 0, 5), row(9, "a", 0, 2), row(2, "a", 0, 5)], True)
    assert cursor.params() == {
        "after_priority": [0],
        "after_run_at": [T0 + timedelta(seconds=5)],
        "after_id": [3],
    }
    broken: tuple[object, ...] = (7, "a", "t", {}, 1, 5, 1, 0, T0, "infinity", False)
    cursor.claimed([row(10, "a", 0, 9), broken], True)
    assert cursor.params() == {"after_priority": [None], "after_run_at": [None], "after_id": [None]}

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
    cursor = ClaimCursor(["a", "b"], clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(3, "a", 0, 1), row(9, "a", 0, 2), row(1, "a", 1, 0), row(4, "b")], True)
    assert cursor.params() == {
        "after_priority": [1, 0],
        "after_run_at": [T0, T0],
        "after_id": [1, 4],
    }


def test_a_queue_without_jobs_in_the_claim_keeps_its_place():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(1, "a"), row(2, "b")], True)
    cursor.claimed([row(5, "a")], True)
    assert cursor.params()["after_id"] == [5, 2]


def test_a_short_claim_keeps_the_key():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(1, "a", 0, 1)], True)
    cursor.params()
    cursor.claimed([row(2, "a", 0, 2)], False)
    assert cursor.params()["after_id"] == [2, None]
    cursor.claimed([], False)
    assert cursor.params()["after_id"] == [2, None]


def test_rewalks_back_off_while_they_find_nothing_before_the_key():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], rescan=0.25, max_rescan=1.0, clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(1, "a", 0, 1)], False)
    gaps = []
    for _ in range(5):
        waited = 0.0
        while cursor.params() != TOP:
            cursor.claimed([], False)
            clock.now += 0.0625  # a binary fraction: the sums are exact
            waited += 0.0625
        gaps.append(round(waited, 2))
        cursor.claimed([row(9, "a", 0, 9)], False)  # after the key: nothing before it
    assert gaps == [0.25, 0.5, 1.0, 1.0, 1.0]


def test_a_rewalk_that_finds_a_job_before_the_key_brings_the_interval_back():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], rescan=0.25, max_rescan=2.0, clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(5, "a", 0, 5)], False)
    for _ in range(3):  # three empty rewalks: 0.25, then 0.5, 1 and now 2 s apart
        clock.now += cursor.interval
        assert cursor.params() == TOP
        cursor.claimed([], False)
    assert cursor.interval == 2.0
    clock.now += 2.0
    assert cursor.params() == TOP
    cursor.claimed([row(3, "a", 0, 1)], False)  # an earlier run_at than the key's
    assert cursor.interval == 0.25
    assert cursor.params()["after_id"] == [5, None]  # the key stays the largest taken


def test_a_full_rewalk_with_jobs_before_the_key_rewalks_at_once():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(5, "a", 0, 5)], True)
    clock.now += 1
    assert cursor.params() == TOP
    cursor.claimed([row(2, "a", 0, 1), row(3, "a", 0, 2)], True)
    assert cursor.params() == TOP  # more may wait before the key
    cursor.claimed([row(4, "a", 0, 3)], False)
    assert cursor.params()["after_id"] == [5, None]


def test_the_top_is_walked_again_after_the_rescan_interval_while_claims_stay_full():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], rescan=0.25, clock=clock, settle=0)
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


def test_reset_forgets_the_keys_and_the_back_off():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], rescan=0.25, clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(1, "a")], False)
    clock.now += 0.25
    cursor.params()
    cursor.claimed([], False)
    assert cursor.interval == 0.5
    cursor.reset()
    assert (cursor.params(), cursor.interval) == (TOP, 0.25)


def test_a_row_whose_run_at_could_not_be_read_sends_the_next_claim_to_the_top():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock, settle=0)
    cursor.params()
    broken: tuple[object, ...] = (7, "a", "t", {}, 1, 5, 1, 0, T0, "infinity", False)
    cursor.claimed([row(1, "a"), broken], True)
    assert cursor.params() == TOP


def test_one_queue_takes_the_largest_key_of_a_claim():
    cursor = ClaimCursor(["a"], clock=Clock(), settle=0)
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


def test_after_a_short_claim_the_walk_starts_after_what_settled_claims_took():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], rescan=10, settle=0.125, clock=clock)
    cursor.params()
    cursor.claimed([row(1, "a", 0, 1), row(2, "b", 0, 1)], False)
    clock.now += 0.0625
    assert cursor.params() == TOP  # nothing settled yet: the first claims walk from the top
    cursor.claimed([row(3, "a", 0, 2)], False)
    clock.now += 0.0625  # the first claim was sent 0.125 s ago, the second 0.0625 s ago
    assert cursor.params()["after_id"] == [1, 2]
    cursor.claimed([row(4, "a", 0, 3)], False)
    clock.now += 0.0625
    assert cursor.params()["after_id"] == [3, 2]
    cursor.claimed([row(5, "a", 0, 4)], True)  # full: a backlog, right after the largest key
    assert cursor.params()["after_id"] == [5, 2]
    cursor.claimed([], False)
    assert cursor.params()["after_id"] == [3, 2]  # short again: settled claims only
    clock.now += 0.125
    assert cursor.params()["after_id"] == [5, 2]


def test_look_from_top_makes_the_next_claim_walk_from_the_top_and_keeps_the_key():
    clock = Clock()
    cursor = ClaimCursor(["a", "b"], clock=clock, settle=0)
    cursor.params()
    cursor.claimed([row(2, "a", 0, 2)], False)
    assert cursor.params()["after_id"] == [2, None]
    cursor.claimed([], False)
    cursor.look_from_top()
    assert cursor.params() == TOP
    cursor.claimed([], False)
    assert cursor.params()["after_id"] == [2, None]

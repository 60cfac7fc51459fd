"""Waiting for room in a bounded queue (pgqueue/client/room.py): the pauses between attempts,
and the refusal raised once the time given is up. The writes themselves are tested against
PostgreSQL (test_flow_policies.py, test_flow_declarations.py, test_caller_transactions.py)."""

from __future__ import annotations

import time

import pytest

from pgqueue import QueueFullError
from pgqueue.client.room import Room


def _refuse(room: Room) -> None:
    with room.attempt():
        raise QueueFullError("q", 1, 1, 1)


def test_pauses_double_up_to_a_second_within_the_time_given() -> None:
    room = Room(3600)
    pauses = []
    for _ in range(9):
        _refuse(room)
        pauses.append(room.pause())
    assert pauses == [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0, 1.0]


def test_the_last_pause_ends_at_the_deadline_and_then_the_refusal_is_raised() -> None:
    room = Room(0.05)
    _refuse(room)
    assert room.pause() == 0.02
    _refuse(room)
    assert 0 < room.pause() <= 0.04
    time.sleep(0.06)
    _refuse(room)
    with pytest.raises(QueueFullError, match="queue 'q' is full"):
        room.pause()


def test_no_time_given_raises_the_first_refusal() -> None:
    room = Room(None)
    _refuse(room)
    with pytest.raises(QueueFullError):
        room.pause()


def test_other_errors_go_through() -> None:
    room = Room(10)
    with pytest.raises(ValueError), room.attempt():
        raise ValueError("not a full queue")

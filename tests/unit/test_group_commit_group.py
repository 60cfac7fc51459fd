"""The rules of a group commit's group (``pgqueue.client.commit_group.Group``), without a
database: who leads, who waits for whom, what a batch takes."""

from __future__ import annotations

import threading

from pgqueue.client import commit_group
from pgqueue.client.commit_group import Call, Group
from pgqueue.rules.job_specs import JobSpec


def call(n: int = 0, args: str = "{}") -> Call:
    return Call(JobSpec(f"t{n}", args, "default", 0, 5))


def group() -> Group:
    return Group(threading.Lock(), threading.Event())


def test_the_first_call_leads_and_the_others_queue_behind_it():
    g = group()
    first, second, third = call(1), call(2), call(3)
    assert g.join(first) is True
    assert g.join(second) is False and g.join(third) is False
    assert list(g.queue) == [second, third]


def test_a_lone_producer_never_waits_to_gather():
    g = group()
    for n in range(3):
        leader = call(n)
        assert g.join(leader)
        assert not g.gather()  # no fixed wait: commit at once
        assert g.gathered(leader) == [leader]
        assert g.next() is None and not g.busy


def test_after_a_commit_of_several_the_leader_waits_for_as_many():
    g = group()
    g.join(call(0))
    for n in range(1, 4):
        g.join(call(n))
    assert len(g.take()) == 3  # the batch behind the first commit
    assert g.next() is None
    leader = call(9)
    assert g.join(leader)
    assert g.gather()  # three came together last time: wait for two more
    assert not g.signal.is_set()
    g.join(call(10))
    assert not g.signal.is_set()
    g.join(call(11))
    assert g.signal.is_set()  # they are all there: the leader goes
    assert len(g.gathered(leader)) == 3
    assert g.recent == 3


def test_a_batch_stops_at_the_limits(monkeypatch):
    monkeypatch.setattr(commit_group, "MOST_JOBS", 2)
    g = group()
    g.join(call(0))
    for n in range(1, 6):
        g.join(call(n))
    assert len(g.take()) == 2
    monkeypatch.setattr(commit_group, "MOST_JOBS", 100)
    monkeypatch.setattr(commit_group, "MOST_BYTES", 10)
    g.join(big := call(7, '{"x": "' + "y" * 20 + '"}'))
    taken = g.take()
    assert len(taken) == 3 and big not in taken  # the first is taken whatever its size
    assert g.take() == [big]


def test_a_waiting_caller_that_gives_up_leaves_the_queue():
    g = group()
    g.join(call(0))
    waiting = call(1)
    g.join(waiting)
    assert not g.withdraw(waiting)
    assert not g.queue
    assert g.next() is None and not g.busy

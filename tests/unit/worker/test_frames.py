"""Every message kind between a worker and its children goes through the wire and comes back
as it was built, read by field name (pgqueue.worker.frames is both sides' one definition)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker import frames
from pgqueue.worker.frames import ChildReply
from pgqueue.worker.outcome import Outcome

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
JOB = ClaimedJob(
    *(7, "mail", "send", {"to": "é", "n": [1, 2]}, 2, 5, 41, -3, AT, AT.replace(hour=9)),
    wants_result=True,
    meta={"tenant": "a"},
    tags=["x", "y"],
    last_trace="00-abc-def-01",
)


def wire(message: frames.Message) -> frames.Message:
    """Through a frame and back, as the other side reads it."""
    [read] = frames.FrameReader().feed(frames.encode(message))
    return read


def test_every_kind_round_trips():
    key = (JOB.id, JOB.lease_token)
    reply = ChildReply("retry", 1.5, '{"e": 1}', "ValueError: x", None)
    batch_reply = ChildReply("ack", items=[ChildReply("ack", result="1"), ChildReply("stopped")])
    built = {
        "job": frames.job(JOB, wake=True, unsettled=False),
        "batch": frames.batch(key, [(JOB, None), (JOB._replace(id=8), "cancelled")]),
        "cancel": frames.cancel(key, "lease lost", whole_batch=True),
        "terminate": frames.terminate(),
        "exit": frames.exit_(),
        "ready": frames.ready(123, ["a", "b"]),
        "fatal": frames.fatal("Traceback ...\nImportError: nope"),
        "log": frames.log({"name": "app", "msg": "hello", "levelno": 20}),
        "progress": frames.progress(key, "3/10"),
        "tx": frames.tx(key, "committed", "succeeded"),
        "done": frames.done(key, reply, 4096),
    }
    assert tuple(built) == frames.KINDS
    read = {kind: wire(message) for kind, message in built.items()}
    assert all(read[kind]["t"] == kind for kind in frames.KINDS)

    order = frames.read_job(read["job"])
    assert order.job == JOB._replace(leased_at=0.0) and (order.wake, order.unsettled) == (
        True,
        False,
    )
    assert frames.key_of(read["job"]) == key
    batch = frames.read_batch(read["batch"])
    assert batch.key == key and batch.jobs == [(JOB, None), (JOB._replace(id=8), "cancelled")]
    cancel = frames.read_cancel(read["cancel"])
    assert (cancel.key, cancel.reason, cancel.whole_batch) == (key, "lease lost", True)
    assert frames.read_ready(read["ready"]) == frozenset(("a", "b"))
    assert frames.read_fatal(read["fatal"]).endswith("ImportError: nope")
    assert frames.read_log(read["log"]) == {"name": "app", "msg": "hello", "levelno": 20}
    assert frames.read_progress(read["progress"]) == "3/10"
    assert frames.key_of(read["progress"]) == key
    assert frames.read_tx(read["tx"]) == ("committed", "succeeded")
    assert frames.read_done(read["done"], 0) == reply
    assert frames.read_rss(read["done"]) == 4096
    assert frames.read_done(wire(frames.done(key, batch_reply, None)), 2) == batch_reply


def test_a_job_is_read_by_field_name_not_position():
    message = wire(frames.job(JOB, wake=False, unsettled=True))
    message["job"] = dict(reversed(list(message["job"].items())))
    assert frames.read_job(message).job == JOB


def test_replies_are_what_the_outcome_says():
    outcome = Outcome(JOB, "error", 2.0, '{"type": "X"}', result=None, summary="X: boom")
    assert ChildReply.of(outcome) == ChildReply("error", 2.0, '{"type": "X"}', "X: boom", None)


@pytest.mark.parametrize(
    ("message", "size"),
    [
        ({"t": "done", "kind": "exploded"}, 0),  # not a kind of outcome
        ({"t": "done", "kind": "ack", "items": [{"kind": "ack"}]}, 2),  # a job missing
        ({"t": "done", "kind": "ack", "items": "nope"}, 1),
    ],
)
def test_a_malformed_answer_is_refused(message, size):
    assert frames.read_done(message, size) is None


def test_unknown_states_and_reasons_are_refused():
    assert frames.read_tx({"t": "tx", "state": "weird"}) is None
    assert frames.read_tx({"t": "tx", "state": None, "as": "bogus"}) == (None, None)
    with pytest.raises(ValueError, match="not a cancel reason"):
        frames.read_cancel({"t": "cancel", "id": 1, "token": 2, "reason": "because"})

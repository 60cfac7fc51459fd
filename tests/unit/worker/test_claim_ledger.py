"""The claim ledger: outcomes held while a claim's COMMIT is on its way, dropped if it failed."""

from __future__ import annotations

from datetime import UTC, datetime

from pgqueue.handler.job_context import ClaimedJob
from pgqueue.worker.claim_ledger import ClaimLedger
from pgqueue.worker.completer import Completer
from pgqueue.worker.outcome import Outcome
from tests.unit.worker.fake_store import FakeStore

AT = datetime(2026, 1, 1, tzinfo=UTC)


def job(job_id: int, token: int = 1, queue: str = "q") -> ClaimedJob:
    return ClaimedJob(job_id, queue, "t", {}, 1, 5, token, 0, AT, AT)


def test_outcomes_of_a_claim_in_flight_wait_for_its_commit():
    ledger = ClaimLedger()
    completer = Completer(FakeStore(), ledger=ledger)
    ledger.claim_pending([(1, 1), (2, 1)])
    completer.submit(Outcome(job(1), "ack"))
    assert completer.pending == [] and not completer.idle()
    assert ledger.not_ours() == {(1, 1), (2, 1)}  # no heartbeat before the commit
    ledger.claim_committed([(1, 1), (2, 1)])
    assert [o.job.id for o in completer.pending] == [1]
    assert ledger.not_ours() == set()


def test_a_claim_that_did_not_commit_writes_nothing(caplog):
    ledger = ClaimLedger()
    completer = Completer(FakeStore(), ledger=ledger)
    ledger.claim_pending([(1, 1), (2, 1)])
    completer.submit(Outcome(job(1), "ack"))
    ledger.claim_failed([(1, 1), (2, 1)], still_running={(2, 1)})
    assert completer.pending == []
    [line] = [r for r in caplog.records if "outcome not written" in r.getMessage()]
    assert (line.action, line.job_id) == ("outcome.claim_uncommitted", 1)
    assert ledger.claim_unsettled(2, 1)
    completer.submit(Outcome(job(2), "ack"))  # its handler returned later: dropped too
    assert completer.pending == [] and not ledger.claim_unsettled(2, 1)


def test_an_outcome_its_transaction_wrote_proves_the_claim_committed():
    ledger = ClaimLedger()
    completer = Completer(FakeStore(), ledger=ledger)
    ledger.claim_failed([(1, 1)], still_running={(1, 1)})
    written = Outcome(job(1), "ack")
    written.written = "succeeded"
    completer.submit(written)
    assert completer.pending == [written]


def test_queues_to_wake_are_named_once_and_forgotten_when_written():
    ledger = ClaimLedger()
    ledger.wake_on_exit(1, 1)
    chunk = [Outcome(job(1, queue="a"), "ack"), Outcome(job(2, queue="b"), "ack")]
    assert ledger.to_wake(chunk) == ["a"]
    assert ledger.woken(chunk) is True
    assert ledger.to_wake(chunk) is None and ledger.woken(chunk) is False

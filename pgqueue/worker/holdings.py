"""What this worker holds, as the heartbeater needs to know it.

A claimed job is held in one of two places until its outcome is written: the executor
(running, waiting for a slot, gathered into a batch) or the completer (finished, its outcome
not written yet). Both keep its lease alive, so the heartbeater extends the leases of both,
less the claims whose COMMIT is still on its way or failed (nothing is ever written under
those: the claim ledger, :mod:`pgqueue.worker.claim_ledger`, knows them). This is the
heartbeater's one view of the two: it reads the leases and the progress handlers reported, and
stops a handler whose lease was lost or whose job was cancelled.
"""

from __future__ import annotations

from pgqueue.handler.job_context import ClaimedJob, JobContext
from pgqueue.rules.vocabulary import CancelReason
from pgqueue.worker.claim_ledger import ClaimLedger
from pgqueue.worker.completer import Completer
from pgqueue.worker.executor import Executor

Lease = tuple[int, int]  # (job id, lease token)


class Holdings:
    def __init__(
        self, executor: Executor, completer: Completer, ledger: ClaimLedger | None = None
    ) -> None:
        self._executor = executor
        self._completer = completer
        self._ledger = ledger if ledger is not None else completer.ledger

    @property
    def slots(self) -> int:
        """The worker's slots now (the heartbeat writes them to its row)."""
        return self._executor.concurrency

    def leases(self) -> list[Lease]:
        """Every lease to extend, sorted by job id (the lock order of every batch)."""
        held = sorted(self._executor.held() + self._completer.held())
        self._ledger.forget_not_ours(set(held))
        not_ours = self._ledger.not_ours()
        if not_ours:
            # Claims not committed yet, or that never did: nothing is written under them.
            held = [pair for pair in held if pair not in not_ours]
        return held

    def progress(self) -> list[tuple[JobContext, str]]:
        """Progress reported since the last call, per running job (taken: a failed beat
        gives it back with ``ctx.keep_progress``)."""
        return [
            (running.ctx, text)
            for running in self._executor.running.values()
            if (text := running.ctx.take_progress()) is not None
        ]

    def job(self, lease: Lease) -> ClaimedJob | None:
        """The job still held under ``lease`` (None: finished and written)."""
        return self._executor.find(*lease)

    def completing(self, lease: Lease) -> bool:
        """Its own ``ctx.transaction()`` completes (or completed) the job."""
        return self._executor.completing(*lease)

    def stop(self, lease: Lease, reason: CancelReason) -> None:
        """Ask the handler of the job held under ``lease`` to stop."""
        job_id, token = lease
        self._executor.stop_job(job_id, reason, token)

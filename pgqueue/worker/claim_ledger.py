"""The claim ledger: what this worker knows of its claims beyond the jobs themselves.

One ledger per worker, handed by the wiring to the fetcher (which records what it claims), the
completer (which asks it before writing an outcome) and the heartbeater's holdings (which
extend no lease the ledger does not vouch for). It keeps, by (job id, lease token):

* **claims whose COMMIT is still on its way** (the fetcher starts an idle worker's jobs as soon
  as the claim's rows arrive, see ``Fetcher._claim_early``): outcomes that arrive meanwhile
  are held here, and nothing is written under such a lease until its claim committed;
* **claims whose COMMIT failed**: the lease was never ours, and after a server crash its token
  may be handed out again, so nothing about these attempts is ever written;
* **jobs that took the last free place under a concurrency limit** (``claim_flow``'s
  ``wake_on_exit``): the statement that writes their outcomes also notifies their queues.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from pgqueue.worker.outcome import Outcome

Lease = tuple[int, int]  # (job id, lease token)
#: What :meth:`ClaimLedger.admit` makes of an outcome.
Admission = Literal["write", "held", "not ours"]


def _lease(outcome: Outcome) -> Lease:
    return (outcome.job.id, outcome.job.lease_token)


class ClaimLedger:
    def __init__(self) -> None:
        #: Claims not committed yet: None while nothing arrived, or the outcomes held back.
        self._uncommitted: dict[Lease, list[Outcome] | None] = {}
        self._not_ours: set[Lease] = set()
        self._wakes: set[Lease] = set()
        #: Where held-back outcomes go once their claim's fate is known (the completer's
        #: ``submit``, which asks :meth:`admit` again).
        self.release: Callable[[Outcome], None] | None = None

    # -- claims in flight --------------------------------------------------------------------

    def admit(self, outcome: Outcome) -> Admission:
        """Whether ``outcome`` may be written now, is held until its claim committed, or
        belongs to a claim that never committed (dropped: the caller logs it)."""
        key = _lease(outcome)
        if outcome.written in ("succeeded", "cancelled"):
            # Its handler's transaction completed the job, having found the row running under
            # this lease: the claim committed, whatever its COMMIT's reply said.
            self._not_ours.discard(key)
            self._release(self._uncommitted.pop(key, None) or ())
            return "write"
        if key in self._uncommitted:
            self._uncommitted[key] = [*(self._uncommitted[key] or ()), outcome]
            return "held"
        if key in self._not_ours:
            self._not_ours.discard(key)
            return "not ours"
        return "write"

    def claim_pending(self, keys: Iterable[Lease]) -> None:
        """These leases were claimed by a transaction not committed yet: hold their outcomes
        until :meth:`claim_committed` or :meth:`claim_failed`."""
        for key in keys:
            self._uncommitted[key] = None

    def pending(self, key: Lease) -> bool:
        """Whether the claim of this lease is still to be settled (an outcome its handler's
        own transaction wrote proved it committed)."""
        return key in self._uncommitted

    def claim_committed(self, keys: Iterable[Lease]) -> None:
        for key in keys:
            self._release(self._uncommitted.pop(key, None) or ())

    def claim_failed(self, keys: Iterable[Lease], still_running: set[Lease]) -> None:
        """The claim's COMMIT failed (or its fate is unknown): drop what these attempts
        produced, and what those ``still_running`` will."""
        for key in keys:
            held = self._uncommitted.pop(key, None) or ()
            if held:
                self._not_ours.add(key)
                self._release(held)  # each is logged and dropped
            if key in still_running:
                self._not_ours.add(key)

    def _release(self, outcomes: Iterable[Outcome]) -> None:
        for outcome in outcomes:
            assert self.release is not None, "the completer takes the ledger's outcomes"
            self.release(outcome)

    def forget_not_ours(self, held: set[Lease]) -> None:
        """Forget failed claims whose handlers have returned without an outcome."""
        self._not_ours &= held

    def not_ours(self) -> set[Lease]:
        """Held jobs whose claim has not committed (or never did): no heartbeat for them."""
        return self._not_ours | self._uncommitted.keys()

    def claim_unsettled(self, job_id: int, lease_token: int) -> bool:
        """Whether the claim of this lease has not committed, or never did."""
        key = (job_id, lease_token)
        return key in self._uncommitted or key in self._not_ours

    def committing(self) -> bool:
        """Whether a claim's COMMIT is still on its way (its outcomes are not written yet)."""
        return bool(self._uncommitted)

    # -- queues to wake ----------------------------------------------------------------------

    def wake_on_exit(self, job_id: int, lease_token: int) -> None:
        """Notify this job's queue when its outcome is written (see ack_jobs_waking)."""
        self._wakes.add((job_id, lease_token))

    def waking(self) -> int:
        """How many held jobs will notify their queues when written."""
        return len(self._wakes)

    def keep_wakes(self, held: set[Lease]) -> None:
        """Forget the jobs not in ``held``: a job whose lease was lost, or that was handed
        back, never gets an outcome written."""
        self._wakes &= held

    def wakes(self, job_id: int, lease_token: int) -> bool:
        """Whether this job's exit notifies its queue (see :meth:`wake_on_exit`)."""
        return (job_id, lease_token) in self._wakes

    def to_wake(self, chunk: list[Outcome]) -> list[str] | None:
        """The queues of the jobs in ``chunk`` that took a limit's last free place (their write
        notifies them), or None (most batches: nothing is held back by a limit)."""
        if not self._wakes:
            return None
        queues = {o.job.queue for o in chunk if _lease(o) in self._wakes}
        return sorted(queues) if queues else None

    def woken(self, chunk: list[Outcome]) -> bool:
        """``chunk`` is written: its notifications went out with it. Whether there were any."""
        notified = False
        if self._wakes:
            for outcome in chunk:
                key = _lease(outcome)
                if key in self._wakes:
                    self._wakes.discard(key)
                    notified = True
        return notified

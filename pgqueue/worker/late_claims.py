"""Claimed rows that reach the worker late, and claims whose COMMIT reply is late: their jobs'
leases extended before they can run out.

The database sets each claimed job's lease to expire ``lease`` seconds after the claim ran, and
the worker counts a lease from when it sent the claim (:mod:`pgqueue.worker.leases`). The rows
can reach the worker much later: a lossy link retransmits them, or a handler blocks the event
loop while they wait in the socket. By then the leases may have run out:

* a claim that commits at once (a busy worker's, one statement) may have had its jobs taken
  back by the reaper, and claimed again by another worker, while its rows were on their way;
* an idle worker's claim commits once its rows are read (``WorkerStore.before_commit``), so
  rows read late would commit leases that expired already, for any reaper to take from a
  worker running the jobs.

Rows that come more than half a lease after the claim was sent are therefore confirmed first,
with one statement (``confirm_claims``) that extends their leases under the claim's token. A
committed claim's (:func:`confirmed`): only the jobs it returns start, the others are someone
else's now. An idle worker's claim runs it in its own transaction before it commits
(:class:`ExtendedBeforeCommit`): a statement on another connection would not see the claim's
rows until then, and would skip them. Rows on time cost nothing more.

An idle worker's claim whose rows came on time but whose ``COMMIT`` reply is slow (a lossy
link, a slow WAL flush) runs its jobs meanwhile, and the heartbeater leaves them out until the
reply says the claim committed (:mod:`pgqueue.worker.claim_ledger`): their leases would run out
under the running handlers. While that reply is awaited, :class:`LateClaims` extends them every
half lease (sooner while the commit is not visible yet).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, NamedTuple

from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.store import FLOW_CLAIM_COLUMNS, TRANSIENT_ERRORS, Row, WorkerStore

# Positions in a claim's rows (see pgqueue.worker.fetcher).
_ID, _TOKEN = FLOW_CLAIM_COLUMNS.index("id"), FLOW_CLAIM_COLUMNS.index("lease_token")

#: How soon a claim whose commit is not visible yet is asked again (LateClaims._kept).
_NOT_VISIBLE_YET = 0.05

Key = tuple[int, int]  # (job id, lease token)


class Claimed(NamedTuple):
    """What a claim came back with."""

    rows: list[Row]
    #: When limits held work back: seconds until a retry may succeed (0: unknown).
    throttled: float | None
    #: The jobs were handed over already (an idle worker's claim, see Fetcher._claim_early).
    handed: bool
    #: When the jobs' leases were set (monotonic): the claim's send time, or the confirmation's.
    leased_at: float


def late_by(sent_at: float, lease: float) -> float | None:
    """Seconds since ``sent_at`` if that is more than half a lease (the rows came late)."""
    late = time.monotonic() - sent_at
    return late if late > lease / 2 else None


async def confirmed(
    store: WorkerStore,
    rows: list[Row],
    sent_at: float,
    *,
    lease: float,
    worker_id: str,
    log: logging.Logger,
) -> tuple[list[Row], float]:
    """A committed claim's rows whose jobs may start, and when their leases were set."""
    late = late_by(sent_at, lease)
    if not rows or late is None:
        return rows, sent_at
    confirmed_at = time.monotonic()
    keys = [(row[_ID], row[_TOKEN]) for row in rows]
    kept = await _extend(store, keys, lease=lease, worker_id=worker_id)
    started = [row for row in rows if (row[_ID], row[_TOKEN]) in kept]
    lost = sorted(key[0] for key in keys if key not in kept)
    if started:
        log_extended(log, [row[_ID] for row in started], late)
    if lost:
        log.warning(
            "claim came late: jobs taken back meanwhile, not started",
            extra=fields(
                Action.CLAIM_LATE_LOST, job_ids=",".join(map(str, lost)), seconds=round(late, 3)
            ),
        )
    return started, confirmed_at


class ExtendedBeforeCommit:
    """``before_sync`` for an idle worker's claim (``WorkerStore.before_commit``): rows that
    came late have their leases extended in the claim's transaction, before it commits. They
    are all this worker's there (the claim holds them), so every job starts."""

    def __init__(self, sent_at: float, *, lease: float, worker_id: str) -> None:
        self.sent_at = sent_at
        self.lease = lease
        self.worker_id = worker_id
        #: When the leases were set (monotonic), and how late the rows were (None: on time).
        self.leased_at = sent_at
        self.late: float | None = None

    def __call__(self, rows: list[Row]) -> Mapping[str, Any] | None:
        """The ``confirm_claims`` parameters for late rows; None for rows on time."""
        late = late_by(self.sent_at, self.lease)
        if not rows or late is None:
            return None
        self.late, self.leased_at = late, time.monotonic()
        keys = [(row[_ID], row[_TOKEN]) for row in rows]
        return _params(keys, lease=self.lease, worker_id=self.worker_id)


def log_extended(log: logging.Logger, job_ids: Sequence[int], late: float) -> None:
    log.info(
        "claim came late: leases extended",
        extra=fields(
            Action.CLAIM_LATE_CONFIRMED,
            job_ids=",".join(map(str, job_ids)),
            seconds=round(late, 3),
        ),
    )


async def _extend(
    store: WorkerStore, keys: Sequence[Key], *, lease: float, worker_id: str
) -> set[Key]:
    """The pairs of ``keys`` running under this worker, their leases extended."""
    held = await store.fetch("confirm_claims", _params(keys, lease=lease, worker_id=worker_id))
    return {(row[0], row[1]) for row in held}


def _params(keys: Sequence[Key], *, lease: float, worker_id: str) -> dict[str, Any]:
    return {
        "ids": [key[0] for key in keys],
        "tokens": [key[1] for key in keys],
        "worker_id": worker_id,
        "lease": timedelta(seconds=lease),
    }


class LateClaims:
    """The above for one worker's fetcher: its store, lease and id, and the tasks keeping the
    leases of idle claims whose COMMIT reply is late."""

    def __init__(
        self, store: WorkerStore, *, lease: float, worker_id: str, log: logging.Logger
    ) -> None:
        self.store = store
        self.lease = lease
        self.worker_id = worker_id
        self.log = log
        self.keepers: set[asyncio.Future[None]] = set()

    async def confirmed(self, rows: list[Row], sent_at: float) -> tuple[list[Row], float]:
        return await confirmed(
            self.store, rows, sent_at, lease=self.lease, worker_id=self.worker_id, log=self.log
        )

    def extender(self, sent_at: float) -> ExtendedBeforeCommit:
        return ExtendedBeforeCommit(sent_at, lease=self.lease, worker_id=self.worker_id)

    def keep_while_committing(
        self, commit: asyncio.Task[None], keys: Sequence[Key], leased_at: float
    ) -> None:
        """Should ``commit``'s reply be more than half a lease late, keep ``keys``' leases
        until it comes (:meth:`_kept`, a task in :attr:`keepers` meanwhile). On time, it costs
        a timer."""

        def start() -> None:
            if commit.done():
                return
            keeper = asyncio.ensure_future(self._kept(commit, keys, leased_at))
            self.keepers.add(keeper)
            keeper.add_done_callback(self.keepers.discard)

        timer = asyncio.get_running_loop().call_later(
            max(0.0, leased_at + self.lease / 2 - time.monotonic()), start
        )
        commit.add_done_callback(lambda _: timer.cancel())

    async def _kept(
        self, commit: asyncio.Task[None], keys: Sequence[Key], leased_at: float
    ) -> None:
        """Until ``commit`` (an idle claim's, its leases set at ``leased_at``) is done, extend
        its jobs' leases every half lease. A claim whose commit is not visible yet is not
        matched: it is asked again soon. One that did not commit is settled as before
        (Fetcher._settle), and this ends with its commit's task."""
        lease = self.lease
        due = leased_at + lease / 2
        while True:
            done, _ = await asyncio.wait({commit}, timeout=max(0.0, due - time.monotonic()))
            if done:
                return
            sent_at = time.monotonic()
            try:
                kept = await _extend(self.store, keys, lease=lease, worker_id=self.worker_id)
            except TRANSIENT_ERRORS:
                # The database away: the commit's task meets it too.
                due = time.monotonic() + _NOT_VISIBLE_YET
                continue
            # All found: the next beat in half a lease; some not visible yet: soon.
            due = (
                sent_at + lease / 2
                if len(kept) == len(keys)
                else time.monotonic() + _NOT_VISIBLE_YET
            )
            if kept:
                self.log.info(
                    "claim's COMMIT reply is late: leases extended",
                    extra=fields(
                        Action.CLAIM_COMMIT_LATE,
                        job_ids=",".join(str(key[0]) for key in keys if key in kept),
                        seconds=round(time.monotonic() - leased_at, 3),
                    ),
                )

    async def stop(self) -> None:
        """Stop keeping leases (a COMMIT still on its way when the fetcher stops)."""
        for keeper in list(self.keepers):
            keeper.cancel()
        await asyncio.gather(*self.keepers, return_exceptions=True)

"""How long this worker's leases surely hold: the heartbeater records, the completer asks.

A write whose reply was lost (the connection dropped during the commit: a crash, a failover,
a network cut) is tried again, and the retry may find nothing to write. Two things look alike
then: the first try committed, or the lease was lost and another worker took the job over.
Only the lease tells them apart. The database set each lease to expire ``lease`` seconds after
it ran the claim or the heartbeat that extended it, so a lease holds at least until the time
that statement was *sent* plus ``lease``. Until then no reaper and no other worker can have
touched the job (they wait for the lease to expire), so a retry that finds nothing to write
means the first try committed. After it, the worker cannot tell, and says so.

Both sides run on the worker's event loop: no locking.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pgqueue.handler.job_context import ClaimedJob

Pair = tuple[int, int]  # (job id, lease token)


class LeaseClock:
    def __init__(self, lease: float) -> None:
        self.lease = lease
        # Send time of the last heartbeat that extended each pair (only that beat's pairs: the
        # others were claimed since, or are written).
        self._extended: dict[Pair, float] = {}

    def beat(self, sent_at: float, extended: Iterable[Pair], kept: Iterable[Pair] = ()) -> None:
        """A heartbeat sent at ``sent_at`` extended the leases of ``extended``; it found those of
        ``kept`` held but could not extend them (their rows were locked): what an earlier beat
        said of those still stands."""
        before = self._extended
        self._extended = dict.fromkeys(extended, sent_at)
        for pair in kept:
            if pair in before:
                self._extended[pair] = before[pair]

    def extend(self, sent_at: float, extended: Iterable[Pair]) -> None:
        """A beat of some leases alone (those an earlier beat skipped), sent at ``sent_at``,
        extended ``extended``; what earlier beats said of every other lease still stands."""
        for pair in extended:
            self._extended[pair] = sent_at

    def surely_held(self, job: ClaimedJob, now: float | None = None) -> bool:
        """True while nobody else can have taken ``job`` over since this worker claimed it.

        Not "a heartbeat found it": a heartbeat after the first try committed finds the job
        gone too. A lease is lost only by expiring, so time alone decides."""
        if not job.leased_at:
            return False  # not claimed by this process's fetcher: nothing known
        since = max(job.leased_at, self._extended.get((job.id, job.lease_token), 0.0))
        return (time.monotonic() if now is None else now) < since + self.lease

"""Where the next claim starts its walk of the ready index, per queue.

A claim marks the rows it takes `running`, which leaves their entries in the ready index behind
as dead entries until VACUUM; while a snapshot older than them is held (a long analytics query,
a forgotten ``BEGIN``, a replica with ``hot_standby_feedback``), VACUUM cannot remove them and
no scan may even mark them dead, so a walk from the top of the queue's index visits the heap for
every job claimed since that snapshot was taken. So claims start after a key this worker's
earlier claims took in each queue (``claim_jobs``'s ``after_*`` parameters), after every claim,
full or short, and step over that region only in a bounded way:

* After a full claim (a backlog is draining) the next claim starts right after the largest key
  taken so far.
* After a short claim (the worker is at the live edge of the queue) it starts after the largest
  key taken by claims sent at least ``settle`` seconds ago: it walks again over what the last
  ``settle`` seconds of claims took (at most that many seconds of arrivals), so that a job whose
  transaction began before a claim and committed after it (its ``run_at`` is its transaction's
  start, so it sorts before what that claim took) is still found by the next claims, as long as
  its transaction took less than ``settle`` seconds.
* Jobs of a higher priority (a smaller number) than the key's: ``claim_jobs`` walks those
  priorities from the top on every claim (it crosses only what jobs of those priorities left).
* Any other job that sorts before the key (a transaction longer than ``settle``, a past
  ``run_at`` given at enqueue, a job handed back or reaped, a row another statement had locked
  during a walk) is found by the next walk from the top, the *rewalk*. It comes ``rescan``
  seconds after the last one, and that interval doubles, up to ``max_rescan``, each time a
  rewalk finds nothing before the key (it goes back to ``rescan`` when one does): such a job
  waits at most ``max_rescan`` seconds longer than a walk from the top would have made it
  wait, and while there is nothing to find the dead region is crossed at most once per
  ``max_rescan``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from pgqueue.handler.job_context import CLAIMED_COLUMNS

#: Seconds between rewalks from the top while they find jobs before the key.
CLAIM_RESCAN = 0.25
#: The longest interval between rewalks (reached while they keep finding nothing before the key).
CLAIM_MAX_RESCAN = 2.0
#: After a short claim, the walk starts after what claims sent this long ago took.
CLAIM_SETTLE = 0.1

# Positions in a claim_jobs row (decoded by name into CLAIMED_COLUMNS' order by the store).
_ID, _QUEUE, _PRIORITY, _RUN_AT = map(CLAIMED_COLUMNS.index, ("id", "queue", "priority", "run_at"))
_key = itemgetter(_PRIORITY, _RUN_AT, _ID)

Key = tuple[int, datetime, int]


class ClaimCursor:
    def __init__(
        self,
        queues: Sequence[str],
        rescan: float = CLAIM_RESCAN,
        clock: Callable[[], float] = time.monotonic,
        max_rescan: float = CLAIM_MAX_RESCAN,
        settle: float = CLAIM_SETTLE,
    ) -> None:
        self._index = {queue: i for i, queue in enumerate(queues)}
        self._size = len(queues)
        self.rescan = rescan
        self.max_rescan = max(max_rescan, rescan)
        self.settle = settle
        self.interval = rescan  # until the next rewalk: grows while rewalks find nothing
        self._clock = clock
        # Per queue: the largest key of the claims sent at least `settle` seconds ago, and the
        # (sent at, largest key) of the later ones, oldest first.
        self._settled: list[Key | None] = [None] * self._size
        self._recent: list[deque[tuple[float, Key]]] = [deque() for _ in range(self._size)]
        self._from_top_at = float("-inf")
        self._sent_at = 0.0  # when the last params() was asked for: its claim's time
        self._rewalking = False  # the last params() walked from the top while there was a key
        self._again = False  # a rewalk came back full with jobs before the key: another one
        self._full = False  # the last claim came back full

    def params(self) -> dict[str, list[Any]]:
        """The ``after_*`` parameters for the next claim (all NULL: walk from the top)."""
        now = self._sent_at = self._clock()
        keys = self._keys(now)
        keyed = any(keys)
        # A walk from the top while there is a key is a rewalk: what it finds sets the interval.
        self._rewalking = keyed and (self._again or now - self._from_top_at >= self.interval)
        if self._rewalking or not keyed:
            self._from_top_at = now
            self._again = False
            empty: list[Any] = [None] * self._size
            return {"after_priority": empty, "after_run_at": empty, "after_id": empty}
        return {
            "after_priority": [k[0] if k else None for k in keys],
            "after_run_at": [k[1] if k else None for k in keys],
            "after_id": [k[2] if k else None for k in keys],
        }

    def _keys(self, now: float) -> list[Key | None]:
        """Where each queue's walk starts: after the largest key taken, or, after a short
        claim, the largest key taken by claims sent at least ``settle`` seconds ago."""
        settled = self._settled
        for position, recent in enumerate(self._recent):
            while recent and now - recent[0][0] >= self.settle:
                key = recent.popleft()[1]
                current = settled[position]
                if current is None or key > current:
                    settled[position] = key
        if not self._full:
            return settled
        return [self._largest(position) for position in range(self._size)]

    def claimed(self, rows: Sequence[tuple[Any, ...]], full: bool) -> None:
        """Move on past what a claim took (``full``: it took as many jobs as it asked for)."""
        rewalk, self._rewalking = self._rewalking, False
        self._full = full
        if not rows:
            if rewalk:
                self._found(before=False, full=full)
            return
        if self._size == 1 and not rewalk:
            # One queue (the common case): the largest key in C, not a Python loop per row.
            try:
                row = max(rows, key=_key)
            except TypeError:  # a run_at that is not a datetime: see below
                self.reset()
                return
            if row[_QUEUE] not in self._index or not isinstance(row[_RUN_AT], datetime):
                self.reset()
                return
            self._took(0, _key(row))
            return
        largest: dict[int, Key] = {}
        found_before = False
        if rewalk:
            before = [self._largest(position) for position in range(self._size)]
        for row in rows:
            position = self._index.get(row[_QUEUE])
            run_at = row[_RUN_AT]
            if position is None or not isinstance(run_at, datetime):
                # A row the loaders could not read (an out-of-range timestamp): walk from the
                # top next time rather than guess where this one sorts.
                self.reset()
                return
            key = (row[_PRIORITY], run_at, row[_ID])
            if rewalk and (old := before[position]) is not None and key < old:
                found_before = True
            if position not in largest or key > largest[position]:
                largest[position] = key
        for position, key in largest.items():
            self._took(position, key)
        if rewalk:
            self._found(before=found_before, full=full)

    def _took(self, position: int, key: Key) -> None:
        recent = self._recent[position]
        if recent and recent[-1][0] == self._sent_at:
            key = max(key, recent.pop()[1])
        recent.append((self._sent_at, key))

    def _largest(self, position: int) -> Key | None:
        keys = [key for _, key in self._recent[position]]
        settled = self._settled[position]
        if settled is not None:
            keys.append(settled)
        return max(keys) if keys else None

    def _found(self, *, before: bool, full: bool) -> None:
        """A rewalk came back: it found jobs before the key (``before``) or not."""
        if before:
            self.interval = self.rescan
            self._again = full  # there may be more before the key
        else:
            self.interval = min(self.interval * 2, self.max_rescan)

    def look_from_top(self) -> None:
        """The next claim walks from the top (keeping the keys): before a worker concludes that
        nothing is ready (a burst worker's end, an idle worker's wait), so that no job waiting
        before the key (a dependent made ready, a retry come due, a job handed back) is
        missed."""
        self._again = True

    def reset(self) -> None:
        """Forget the keys: the next claim walks from the top (and rewalks come at ``rescan``)."""
        self._settled = [None] * self._size
        for recent in self._recent:
            recent.clear()
        self.interval = self.rescan
        self._again = False

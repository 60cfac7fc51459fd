"""Where the next claim starts its walk of the ready index, per queue.

A claim marks the rows it takes `running`, which leaves their entries in the ready index behind
as dead entries until VACUUM. A worker draining a long backlog would step over all of them again
on every claim (the walk starts at the top of the queue's index), so claims slow down the longer
the drain runs. Instead, after a claim that came back full, the next claim starts right after the
last key that claim took in each queue (``claim_jobs``'s ``after_*`` parameters).

That is exact for every job at or after the key. A job that sorts before it (a higher priority
enqueued since, a job handed back or reaped, a row another statement had locked during the last
walk) is found by the next walk from the top, which happens after every claim that came back
short (the backlog is gone, so the walk is short too) and at least every ``rescan`` seconds. So
while a backlog drains, such a job may start up to ``rescan`` seconds later than a walk from the
top would have started it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from pgqueue.handler.job_context import CLAIMED_COLUMNS

#: Seconds between walks from the top of the ready index while claims keep coming back full.
CLAIM_RESCAN = 0.25

# Positions in a claim_jobs row (decoded by name into CLAIMED_COLUMNS' order by the store).
_ID, _QUEUE, _PRIORITY, _RUN_AT = map(CLAIMED_COLUMNS.index, ("id", "queue", "priority", "run_at"))
_key = itemgetter(_PRIORITY, _RUN_AT, _ID)


class ClaimCursor:
    def __init__(
        self,
        queues: Sequence[str],
        rescan: float = CLAIM_RESCAN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._index = {queue: i for i, queue in enumerate(queues)}
        self._size = len(queues)
        self.rescan = rescan
        self._clock = clock
        self._keys: list[tuple[int, datetime, int] | None] = [None] * self._size
        self._from_top_at = float("-inf")

    def params(self) -> dict[str, list[Any]]:
        """The ``after_*`` parameters for the next claim (all NULL: walk from the top)."""
        if self._clock() - self._from_top_at >= self.rescan:
            self.reset()
        if not any(self._keys):
            self._from_top_at = self._clock()
            empty: list[Any] = [None] * self._size
            return {"after_priority": empty, "after_run_at": empty, "after_id": empty}
        keys = self._keys
        return {
            "after_priority": [k[0] if k else None for k in keys],
            "after_run_at": [k[1] if k else None for k in keys],
            "after_id": [k[2] if k else None for k in keys],
        }

    def claimed(self, rows: Sequence[tuple[Any, ...]], full: bool) -> None:
        """Move on past what a claim took; a claim that came back short resets to the top."""
        if not full:
            self.reset()
            return
        if not rows:
            return
        keys = self._keys
        if self._size == 1:
            # One queue (the common case): the largest key in C, not a Python loop per row.
            try:
                row = max(rows, key=_key)
            except TypeError:  # a run_at that is not a datetime: see below
                self.reset()
                return
            if row[_QUEUE] not in self._index or not isinstance(row[_RUN_AT], datetime):
                self.reset()
                return
            key = _key(row)
            if keys[0] is None or key > keys[0]:
                keys[0] = key
            return
        for row in rows:
            position = self._index.get(row[_QUEUE])
            run_at = row[_RUN_AT]
            if position is None or not isinstance(run_at, datetime):
                # A row the loaders could not read (an out-of-range timestamp): walk from the
                # top next time rather than guess where this one sorts.
                self.reset()
                return
            key = (row[_PRIORITY], run_at, row[_ID])
            current = keys[position]
            if current is None or key > current:
                keys[position] = key

    def reset(self) -> None:
        self._keys = [None] * self._size

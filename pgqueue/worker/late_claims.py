"""Claimed rows that reach the worker late: confirmed before their jobs start.

The database sets each claimed job's lease to expire ``lease`` seconds after the claim ran, and
the worker counts a lease from when it sent the claim (:mod:`pgqueue.worker.leases`). The rows
can reach the worker much later: a lossy link retransmits them, or a handler blocks the event
loop while they wait in the socket. By then the leases may have run out:

* a claim that commits at once (a busy worker's, one statement) may have had its jobs taken
  back by the reaper, and claimed again by another worker, while its rows were on their way;
* an idle worker's claim commits once its rows are read (``WorkerStore.before_commit``), so
  rows read late commit leases that expired already, for any reaper to take from a worker
  running the jobs.

Rows that come more than half a lease after the claim was sent are therefore confirmed first:
one statement (``confirm_claims``) extends their leases under the claim's token, and only the
jobs it returns start; the others are someone else's now. Rows on time cost nothing more.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import NamedTuple

from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.store import FLOW_CLAIM_COLUMNS, Row, WorkerStore

# Positions in a claim's rows (see pgqueue.worker.fetcher).
_ID, _TOKEN = FLOW_CLAIM_COLUMNS.index("id"), FLOW_CLAIM_COLUMNS.index("lease_token")


class Claimed(NamedTuple):
    """What a claim came back with."""

    rows: list[Row]
    #: When limits held work back: seconds until a retry may succeed (0: unknown).
    throttled: float | None
    #: The jobs were handed over already (an idle worker's claim, see Fetcher._claim_early).
    handed: bool
    #: When the jobs' leases were set (monotonic): the claim's send time, or the confirmation's.
    leased_at: float


async def confirmed(
    store: WorkerStore,
    rows: list[Row],
    sent_at: float,
    *,
    lease: float,
    worker_id: str,
    log: logging.Logger,
) -> tuple[list[Row], float]:
    """The rows whose jobs may start, and when their leases were set (monotonic)."""
    late = time.monotonic() - sent_at
    if not rows or late <= lease / 2:
        return rows, sent_at
    confirmed_at = time.monotonic()
    keys = [(row[_ID], row[_TOKEN]) for row in rows]
    held = await store.fetch(
        "confirm_claims",
        {
            "ids": [key[0] for key in keys],
            "tokens": [key[1] for key in keys],
            "worker_id": worker_id,
            "lease": timedelta(seconds=lease),
        },
    )
    kept = {(row[0], row[1]) for row in held}
    started = [row for row in rows if (row[_ID], row[_TOKEN]) in kept]
    lost = sorted(key[0] for key in keys if key not in kept)
    if started:
        log.info(
            "claim came late: leases extended",
            extra=fields(
                Action.CLAIM_LATE_CONFIRMED,
                job_ids=",".join(str(row[_ID]) for row in started),
                seconds=round(late, 3),
            ),
        )
    if lost:
        log.warning(
            "claim came late: jobs taken back meanwhile, not started",
            extra=fields(
                Action.CLAIM_LATE_LOST, job_ids=",".join(map(str, lost)), seconds=round(late, 3)
            ),
        )
    return started, confirmed_at

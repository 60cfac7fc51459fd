"""Extra tasks for the operations tests, on top of worker_app's (same PgQueue, same ledger):

pgq work tests.integration.ops_app:pgq
"""

from __future__ import annotations

import logging
import time

from pgqueue import current_job
from tests.integration.worker_app import pgq, record

__all__ = ["pgq"]

log = logging.getLogger("myapp.billing")


@pgq.task(name="logs_a_line")
def logs_a_line(order: int) -> None:
    log.info("charging card order=%s", order)
    record("end")


@pgq.task(name="slow_first_attempt", max_attempts=3)
def slow_first_attempt(seconds: float) -> None:
    """Hangs on its first attempt (long enough to be killed there); the next one is quick."""
    record("start")
    if current_job().attempt == 1:
        time.sleep(seconds)
    record("end")

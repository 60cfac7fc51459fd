"""Extra tasks for the operations tests, on top of worker_app's (same PgQueue, same ledger):

pgq work tests.integration.ops_app:pgq
"""

from __future__ import annotations

import logging

from tests.integration.worker_app import pgq, record

__all__ = ["pgq"]

log = logging.getLogger("myapp.billing")


@pgq.task(name="logs_a_line")
def logs_a_line(order: int) -> None:
    log.info("charging card order=%s", order)
    record("end")

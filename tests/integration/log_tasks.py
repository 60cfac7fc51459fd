"""Tasks for the logging tests, on worker_app's PgQueue (with ops_app's tasks too):

pgq work tests.integration.log_tasks:pgq
"""

from __future__ import annotations

import logging

from tests.integration.ops_app import pgq
from tests.integration.worker_app import arecord, record

__all__ = ["pgq"]

log = logging.getLogger("myapp.orders")


@pgq.task(name="logs_with_extra")
def logs_with_extra(order: int) -> None:
    """One application line with typed arguments and ``extra=`` values."""
    log.info(
        "order shipped order=%s",
        order,
        extra={"customer": "c-1", "amount_cents": 1250, "gift": True, "weight": 0.5},
    )
    record("end")


@pgq.task(name="chatty")
async def chatty(n: int = 0, lines: int = 4) -> None:
    """Logs ``lines`` INFO lines from the event loop (an async handler), then finishes."""
    for step in range(lines):
        log.info("step done n=%s step=%s", n, step)
    await arecord("end")

"""An app whose tasks declare their own queues (for the worker's default queue selection):

pgq work tests.integration.queues_app:pgq
"""

from __future__ import annotations

from pgqueue import PgQueue

pgq = PgQueue()


@pgq.task(name="q.welcome", queue="emails", result_ttl=60)
def welcome(to: str) -> str:
    return f"welcome {to}"


@pgq.task(name="q.report", queue="reports", result_ttl=60)
def report(month: str) -> str:
    return f"report {month}"


@pgq.task(name="q.plain", result_ttl=60)
def plain() -> str:
    return "plain"

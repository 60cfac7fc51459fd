"""Tasks for the tenant-fairness tests, importable by real `pgq work` processes:

    pgq work tests.integration.fair_app:pgq --queue tenants,accounts,rated,shared

Handlers write 'start' and 'end' rows to the effects ledger (see worker_app) with their key as
the note, so tests can read the order jobs started in, overlaps per key, and start rates.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pgqueue import PgQueue, RateLimit, current_job
from tests.integration.worker_app import arecord

pgq = PgQueue()

QUEUES = ("tenants", "accounts", "rated", "shared")


async def _hold(seconds: float) -> None:
    key = str(current_job().args.get("tenant") or current_job().args.get("account", {}).get("id"))
    await arecord("start", key)
    if seconds:
        await asyncio.sleep(seconds)
    await arecord("end", key)


@pgq.task(name="fair.tenant", queue="tenants", limit_by="tenant")
async def tenant(tenant: str, seconds: float = 0.0) -> None:
    """One tenant's job: no limit per tenant, only its place in a fair queue."""
    await _hold(seconds)


@pgq.task(name="fair.account", queue="accounts", limit_by="account.id", key_limit=2)
async def account(account: dict[str, Any], seconds: float = 0.2) -> None:
    """At most two running per account, fleet-wide (the key is inside a dict argument)."""
    await _hold(seconds)


@pgq.task(name="fair.rated", queue="rated", limit_by="tenant", key_rate_limit=RateLimit(5, burst=2))
async def rated(tenant: str, seconds: float = 0.0) -> None:
    """Five starts per second per tenant, bursts of two; tenants do not share a bucket."""
    await _hold(seconds)


@pgq.task(name="fair.shared", queue="shared", limit_by="tenant", concurrency_limit=2)
async def shared(tenant: str, seconds: float = 0.1) -> None:
    """At most two running at once across every tenant (a task limit in a fair queue)."""
    await _hold(seconds)

"""A worker app with cron schedules (kept apart so other tests' workers see no ticks)."""

from __future__ import annotations

from pgqueue import PgQueue, current_job
from tests.integration.worker_app import arecord

pgq = PgQueue()


@pgq.periodic("* * * * * *", name="every_second", queue="cron")
async def every_second() -> None:
    await arecord("tick", f"every_second:{current_job().run_at.isoformat()}")


@pgq.periodic("* * * * * */2", name="every_two_seconds", queue="cron")
async def every_two_seconds() -> None:
    await arecord("tick", f"every_two_seconds:{current_job().run_at.isoformat()}")


@pgq.periodic("0 3 * * *", tz="Europe/Paris", name="nightly", queue="cron", missed="catch_up")
async def nightly() -> None:
    await arecord("tick", f"nightly:{current_job().run_at.isoformat()}")

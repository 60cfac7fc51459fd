"""``pgq.admin``: operators' actions on dead letters and leases (the plans are in
:mod:`pgqueue.db.admin`; ``pgq dlq`` and ``pgq reaper`` are the command line)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pgqueue.client.part import Part
from pgqueue.db import admin

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.db.admin import DeadLetterFilter
    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg


class Admin(Part):
    """Operators' actions (``pgq.admin``): dead letters and the reaper. Filters
    (:class:`~pgqueue.db.admin.DeadLetterFilter`): ``ids``, ``task``, ``queue``, ``error`` (a
    substring of the last error), ``since`` and ``until`` (timezone-aware datetimes, on the
    time the job died)."""

    def dead_letters(
        self,
        *,
        limit: int = 100,
        conn: ConnectionArg | None = None,
        **filters: Unpack[DeadLetterFilter],
    ) -> list[dict[str, Any]]:
        """Dead letters matching ``filters``, newest first, at most ``limit``."""
        return self._client.run(admin.list_dead_letters(filters, limit), conn)

    async def dead_letters_async(
        self,
        *,
        limit: int = 100,
        conn: AsyncConnectionArg | None = None,
        **filters: Unpack[DeadLetterFilter],
    ) -> list[dict[str, Any]]:
        """The async twin of :meth:`dead_letters`."""
        return await self._client.run_async(admin.list_dead_letters(filters, limit), conn)

    def replay_dead_letters(
        self,
        *,
        batch_size: int = 500,
        dry_run: bool = False,
        conn: ConnectionArg | None = None,
        **filters: Unpack[DeadLetterFilter],
    ) -> int:
        """Move matching dead letters back to their queue with fresh attempts, in batches of
        ``batch_size`` (one transaction each unless ``conn`` is given). Returns how many were
        (or, with ``dry_run``, would be) replayed."""
        return self._client.run(admin.replay_dead_letters(filters, batch_size, dry_run), conn)

    async def replay_dead_letters_async(
        self,
        *,
        batch_size: int = 500,
        dry_run: bool = False,
        conn: AsyncConnectionArg | None = None,
        **filters: Unpack[DeadLetterFilter],
    ) -> int:
        """The async twin of :meth:`replay_dead_letters`."""
        plan = admin.replay_dead_letters(filters, batch_size, dry_run)
        return await self._client.run_async(plan, conn)

    def reap(self, max_jobs: int = 1000, *, conn: ConnectionArg | None = None) -> int:
        """Run the reaper once (what ``pgq reaper`` and pg_cron do): jobs whose lease expired
        go back to their queue, or to the dead letters without attempts left. Returns how
        many were recovered."""
        return self._client.run(admin.reap(max_jobs), conn)

    async def reap_async(
        self, max_jobs: int = 1000, *, conn: AsyncConnectionArg | None = None
    ) -> int:
        """The async twin of :meth:`reap`."""
        return await self._client.run_async(admin.reap(max_jobs), conn)

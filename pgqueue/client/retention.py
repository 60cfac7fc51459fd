"""``pgq.retention``: how long finished jobs, results and dead letters are kept (the plans are
in :mod:`pgqueue.db.retention`; ``pgq retention`` is the command line)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgqueue.client.part import Part
from pgqueue.db import retention
from pgqueue.db.retention import PRUNE_BATCH, PruneReport, RetentionSettings

if TYPE_CHECKING:
    from typing import Unpack

    from pgqueue.db.connections import AsyncConnectionArg, ConnectionArg
    from pgqueue.db.retention import RetentionChanges


class Retention(Part):
    """Retention (``pgq.retention``): one row of settings that every worker's acks and
    pruner read, so a change applies to all of them at once."""

    def settings(self, *, conn: ConnectionArg | None = None) -> RetentionSettings:
        """The retention settings every worker uses (the ``pgqueue.retention`` row)."""
        return self._client.run(retention.get_settings(), conn)

    async def settings_async(self, *, conn: AsyncConnectionArg | None = None) -> RetentionSettings:
        """The async twin of :meth:`settings`."""
        return await self._client.run_async(retention.get_settings(), conn)

    def set(
        self, *, conn: ConnectionArg | None = None, **changes: Unpack[RetentionChanges]
    ) -> RetentionSettings:
        """Change retention for every worker at once
        (:class:`~pgqueue.db.retention.RetentionChanges`):
        ``history`` (how long job_history rows are kept; 0: none), ``record_succeeded``
        (record every succeeded job), ``dead_letters`` (purge dead letters older than this,
        or ``"never"``). Settings left out do not change. Returns the new settings."""
        return self._client.run(retention.set_settings(**changes), conn, atomic=True)

    async def set_async(
        self, *, conn: AsyncConnectionArg | None = None, **changes: Unpack[RetentionChanges]
    ) -> RetentionSettings:
        """The async twin of :meth:`set`."""
        return await self._client.run_async(retention.set_settings(**changes), conn, atomic=True)

    def prune(
        self, *, batch_size: int = PRUNE_BATCH, conn: ConnectionArg | None = None
    ) -> PruneReport:
        """One pruning pass (what every worker's pruner does periodically): expired history
        and results, old dead letters, emptied workflows, in batches of ``batch_size``."""
        return self._client.run(retention.prune(batch_size), conn)

    async def prune_async(
        self, *, batch_size: int = PRUNE_BATCH, conn: AsyncConnectionArg | None = None
    ) -> PruneReport:
        """The async twin of :meth:`prune`."""
        return await self._client.run_async(retention.prune(batch_size), conn)

"""When a child of the process pool is replaced: after ``max_jobs`` jobs, or when its memory
after a job is over ``max_memory_mb``; and the words a retired child is logged with."""

from __future__ import annotations

import logging

from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.child_process import ChildSettings

log = logging.getLogger("pgqueue.worker.pool")


def shrunk(size: int) -> str:
    """Why an idle child is retired when the pool is over its size (the autoscaler)."""
    return f"the pool shrank to {size}"


class Recycling:
    def __init__(self, settings: ChildSettings) -> None:
        self.settings = settings
        self._warned_rss = False

    def why_replace(self, jobs: int, rss: int | None) -> str | None:
        """Why a child that ran ``jobs`` jobs, ``rss`` bytes resident after the last one (None:
        unknown), is replaced now; None: it is kept."""
        settings = self.settings
        if settings.max_jobs is not None and jobs >= settings.max_jobs:
            return f"it ran {jobs} jobs (max-jobs-per-child {settings.max_jobs})"
        if settings.max_memory_mb is not None:
            if rss is None:
                if not self._warned_rss:
                    self._warned_rss = True
                    log.warning(
                        "max-memory-per-child is not applied: children cannot read their "
                        "memory use on this system",
                        extra=fields(Action.POOL_MEMORY_UNCHECKED),
                    )
            elif rss > settings.max_memory_mb * 2**20:
                return (
                    f"its memory (RSS) was {rss / 2**20:.0f} MB after a job "
                    f"(max-memory-per-child {settings.max_memory_mb:g} MB)"
                )
        return None

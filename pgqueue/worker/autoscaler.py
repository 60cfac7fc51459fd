"""The autoscaler: grows and shrinks a worker's slots between a minimum and a maximum.

``pgq work --concurrency 4:64`` starts with 4 slots. While (nearly) every slot is busy and the
claims come back full (ready jobs are waiting), it adds slots (x1.5, at least one more) every
``grow_after`` seconds; when at most half the slots have been busy for a whole ``cooldown``, it
halves them (never below the minimum). The cooldown after every change keeps it from flapping.
Fleet-wide scaling (more processes) reads the ``pgqueue.queue_depth`` view instead.
"""

from __future__ import annotations

import asyncio
import math

from pgqueue.rules.log_actions import Action, fields
from pgqueue.worker.executor import Executor
from pgqueue.worker.fetcher import Fetcher
from pgqueue.worker.service import Service


class Autoscaler(Service):
    name = "autoscaler"
    jitter = 0.0

    def __init__(
        self,
        executor: Executor,
        fetcher: Fetcher,
        *,
        minimum: int,
        maximum: int,
        cooldown: float,
        grow_after: float = 1.0,
    ) -> None:
        super().__init__()
        self.executor = executor
        self.fetcher = fetcher
        self.minimum = minimum
        self.maximum = maximum
        self.cooldown = cooldown
        self.grow_after = grow_after
        self._busy_since: float | None = None
        self._idle_since: float | None = None
        self._changed_at = -math.inf
        self.changes: list[tuple[int, int]] = []

    def interval(self) -> float:
        return min(0.25, self.grow_after / 2)

    async def run_once(self) -> None:
        now = asyncio.get_running_loop().time()
        current = self.executor.concurrency
        running = self.executor.slots_busy()
        # Busy: (nearly) every slot taken (with short jobs a slot is always being refilled) and
        # the last claim came back full (ready jobs are waiting).
        saturated = running >= current - max(1, current // 10) and self.fetcher.saturated
        self._busy_since = (self._busy_since or now) if saturated else None
        underused = running <= current // 2
        self._idle_since = (self._idle_since or now) if underused else None
        if (
            self._busy_since is not None
            and current < self.maximum
            and now - self._busy_since >= self.grow_after
            and now - self._changed_at >= self.grow_after
        ):
            self._resize(min(self.maximum, max(current + 1, math.ceil(current * 1.5))), now)
        elif (
            self._idle_since is not None
            and current > self.minimum
            and now - self._idle_since >= self.cooldown
            and now - self._changed_at >= self.cooldown
        ):
            self._resize(max(self.minimum, running, current // 2), now)

    def _resize(self, size: int, now: float) -> None:
        before = self.executor.concurrency
        if size == before:
            return
        self.executor.resize(size)
        self.changes.append((before, size))
        self._changed_at = now
        self._busy_since = self._idle_since = None
        self.log.info(
            "concurrency %s -> %s",
            before,
            size,
            extra=fields(Action.WORKER_CONCURRENCY, running=len(self.executor.running)),
        )

"""The supervisor: starts the worker's parts in order and stops them in reverse.

Every part is a :class:`~pgqueue.worker.service.Service` (or a plain loop, the watchdog's) run
as a task of its own. The supervisor gives the services the worker's observer and the
:class:`~pgqueue.worker.service.Outage` of the database they use, so they back off together
through an outage and one of them speaks for all. Stopping is in two steps when the worker
drains: the fetcher first (no more claims), the rest (heartbeats until the last job is
written) once the running jobs finished or were handed back. A part added ``after`` another
service starts running once that one has run once: the worker's housekeeping waits for the
fetcher's first claim.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from pgqueue.worker.observer import WorkerObserver
from pgqueue.worker.service import Outage, Service, after_first_run

S = TypeVar("S", bound=Service)


class Supervisor:
    def __init__(self, observer: WorkerObserver) -> None:
        self.observer = observer
        #: In start order: a service, or a plain loop's name and coroutine function.
        self._parts: list[Service | tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}  # by id() of the part
        #: The service whose first run a part waits for before its own (by id() of the part).
        self._after: dict[int, Service] = {}

    def add(self, service: S, outage: Outage, *, after: Service | None = None) -> S:
        """Supervise ``service``, backing off with the other services of ``outage``.
        ``after``: start running once that service has run once (see ``after_first_run``)."""
        service.observer = self.observer
        service.outage = outage
        self._parts.append(service)
        if after is not None:
            self._after[id(service)] = after
        return service

    def add_loop(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run ``loop()`` beside the services until the supervisor stops it (cancels it)."""
        self._parts.append((name, loop))

    @property
    def services(self) -> list[Service]:
        return [part for part in self._parts if isinstance(part, Service)]

    def deferred(self) -> list[Service]:
        """The services that wait for another's first run before their own (``add(after=)``)."""
        return [part for part in self.services if id(part) in self._after]

    def start(self) -> None:
        """Start every part, in the order added."""
        for part in self._parts:
            if isinstance(part, Service):
                name = part.name
                after = self._after.get(id(part))
                coroutine = part.run() if after is None else _run_after(after, part)
            else:
                name, coroutine = part[0], part[1]()
            self._tasks[id(part)] = asyncio.create_task(coroutine, name=f"pgqueue-{name}")

    async def stop(self, *services: Service) -> None:
        """Stop ``services`` (or every part still running, the last started first) and wait
        until their tasks ended."""
        parts = list(services) if services else list(reversed(self._parts))
        for part in parts:
            if isinstance(part, Service):
                part.stop()
        tasks = [task for part in parts if (task := self._tasks.pop(id(part), None))]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for part in parts:
            if part in self._parts:
                self._parts.remove(part)


async def _run_after(first: Service, service: Service) -> None:
    await after_first_run(first)
    await service.run()

"""Tasks that start at once: on Python 3.12+ the coroutine runs up to its first real
suspension inside the call that makes the task, not on the loop's next iteration (earlier
Pythons: the usual task).

A turn of the loop costs tens of microseconds, and on the way from a notification to a running
handler it came three times over. The worker starts eagerly what stands on that path: a job's
handler (one that never waits, a no-op or a cache hit, is done without a trip through the
loop's ready queue), an idle claim (sent in the turn that decided it), and the claim's commit
(its first step comes before the jobs' hand-over, not after it, on a loop a ``def`` handler's
thread waits on for the GIL). The other services keep the usual order.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

if sys.version_info >= (3, 12):

    def eager_task(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        loop = asyncio.get_running_loop()
        return asyncio.Task(coro, loop=loop, name=name, eager_start=True)

else:

    def eager_task(coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        return asyncio.get_running_loop().create_task(coro, name=name)

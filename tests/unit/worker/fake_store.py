"""A worker store without PostgreSQL: it records every statement a service sends and answers
with scripted rows, so the services' logic is tested on its own (the integration suite runs
the same services against PostgreSQL).

Every name is checked against ``pgqueue/db/queries/`` as it is sent: a fake cannot answer
a query the real store would not know.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg.rows import scalar_row

from pgqueue.db.plan import Plan, Query
from pgqueue.db.queries import query
from pgqueue.worker.store import BeforeSync, Row

T = TypeVar("T")

#: What a query answers: rows, rows made from the statement's parameters, or an error raised.
Reply = list[Row] | Callable[[Mapping[str, Any]], list[Row]] | BaseException


@dataclass
class Statement:
    name: str
    params: dict[str, Any]
    #: Sent with the statement before it in one transaction (before_commit, drive(atomic)).
    transaction: int | None = None


@dataclass
class FakeStore:
    #: Standing replies by query name (a name without one answers no rows).
    replies: dict[str, Reply] = field(default_factory=dict)
    statements: list[Statement] = field(default_factory=list)
    #: Replies used once each, before the standing one (see :meth:`once`).
    queued: dict[str, deque[Reply]] = field(default_factory=dict)
    #: What the next before_commit's COMMIT does: None commits, an error fails it.
    commit_error: BaseException | None = None
    _transactions: int = 0

    def once(self, name: str, *replies: Reply) -> None:
        self.queued.setdefault(name, deque()).extend(replies)

    def names(self) -> list[str]:
        return [statement.name for statement in self.statements]

    def sent(self, name: str) -> list[dict[str, Any]]:
        """The parameters of every ``name`` statement sent, in order."""
        return [s.params for s in self.statements if s.name == name]

    def explain(self, exc: BaseException) -> str:
        return str(exc)

    async def fetch(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        timeout: float = 30.0,
        *,
        transaction: int | None = None,
    ) -> list[Row]:
        query(name)  # KeyError for a name no query file defines
        self.statements.append(Statement(name, dict(params or {}), transaction))
        await asyncio.sleep(0)  # a round trip lets the loop run, as the real one does
        pending = self.queued.get(name)
        reply = pending.popleft() if pending else self.replies.get(name, [])
        if isinstance(reply, BaseException):
            raise reply
        return reply(params or {}) if callable(reply) else list(reply)

    async def before_commit(
        self,
        name: str,
        then: str,
        params: Mapping[str, Any],
        *,
        generic: bool = False,
        before_sync: BeforeSync | None = None,
        timeout: float = 30.0,
    ) -> tuple[list[Row], asyncio.Future[list[Row]], asyncio.Task[None]]:
        self._transactions += 1
        tx = self._transactions
        rows = await self.fetch(name, params, transaction=tx)
        confirm = before_sync(rows) if before_sync is not None else None
        if confirm is not None:
            await self.fetch("confirm_claims", confirm, transaction=tx)
        later_rows = await self.fetch(then, params, transaction=tx)
        loop = asyncio.get_running_loop()
        later: asyncio.Future[list[Row]] = loop.create_future()
        later.set_result(later_rows)
        error, self.commit_error = self.commit_error, None

        async def commit() -> None:
            await asyncio.sleep(0)
            if error is not None:
                raise error

        return rows, later, asyncio.create_task(commit())

    async def drive(self, plan: Plan[T], *, atomic: bool = False, timeout: float = 30.0) -> T:
        tx = None
        if atomic:
            self._transactions += 1
            tx = self._transactions
        try:
            step = next(plan)
            while True:
                assert isinstance(step, Query), f"the worker runs queries only, not {step!r}"
                rows = await self.fetch(step.name, step.params, transaction=tx)
                if step.row is scalar_row:
                    rows = [row[0] for row in rows]
                # (Other row factories: a reply scripts the rows as the factory builds them.)
                step = plan.send(rows)
        except StopIteration as done:
            return done.value

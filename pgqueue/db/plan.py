"""One definition of each multi-step database operation, driven by a sync or an async connection.

An operation is written once as a generator (a *plan*) that yields :class:`Query` / :class:`CopyIn`
steps and receives each step's rows back. :func:`run` drives it on a ``psycopg.Connection`` and
:func:`run_async` on a ``psycopg.AsyncConnection``, so the sync and async APIs share every line of
query building and result handling and cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from pgqueue.db.queries import query

T = TypeVar("T")
Row = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Query:
    """Run the named query with ``params``; the plan receives all result rows (or [])."""

    name: str
    params: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class CopyIn:
    """Stream ``rows`` with the named ``COPY ... FROM STDIN (FORMAT BINARY)`` query."""

    name: str
    rows: Iterable[Sequence[Any]]
    types: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait up to ``timeout`` seconds for NOTIFY on a channel the connection LISTENs to (an
    autocommit connection); the plan receives ``[(payload,)]``, or ``[]`` on timeout."""

    timeout: float


Step = Query | CopyIn | Wait
Plan = Generator[Step, list[Row], T]


def run(plan: Plan[T], conn: psycopg.Connection[Any]) -> T:
    """Drive ``plan`` on a sync connection, in whatever transaction the connection is in."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, Wait):
                notes = conn.notifies(timeout=max(0.0, step.timeout), stop_after=1)
                step = plan.send([(note.payload,) for note in notes])
                continue
            with conn.cursor() as cur:
                if isinstance(step, Query):
                    cur.execute(query(step.name), step.params)
                    rows = cur.fetchall() if cur.description is not None else []
                else:
                    with cur.copy(query(step.name)) as copy:
                        if step.types:
                            copy.set_types(step.types)
                        for row in step.rows:
                            copy.write_row(row)
                    rows = []
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def run_async(plan: Plan[T], conn: psycopg.AsyncConnection[Any]) -> T:
    """Drive ``plan`` on an async connection, in whatever transaction the connection is in."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, Wait):
                notes = conn.notifies(timeout=max(0.0, step.timeout), stop_after=1)
                step = plan.send([(note.payload,) async for note in notes])
                continue
            async with conn.cursor() as cur:
                if isinstance(step, Query):
                    await cur.execute(query(step.name), step.params)
                    rows = await cur.fetchall() if cur.description is not None else []
                else:
                    async with cur.copy(query(step.name)) as copy:
                        if step.types:
                            copy.set_types(step.types)
                        for row in step.rows:
                            await copy.write_row(row)
                    rows = []
            step = plan.send(rows)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]

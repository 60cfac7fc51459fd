"""An async single enqueue costs the event loop one turn, as the sync call costs one ``poll``,
and awaits nothing but its statement.

The answer is read in the loop's turn that sees it, and the waiting task runs its next step in
that same turn (:func:`pgqueue.db.same_turn.wake`): completed the ordinary way, its future
ran it one turn later (a second ``epoll_wait`` and round of the loop per statement). A lone
call through the group commit makes no future either (one is made only for a call that waits
behind a commit in flight). The task woken in the reader's turn runs in its own context, with
no exception of the reader's being handled, and a failed statement still fails its call. The
common call (a registered task, the loop's pool open, its kept connection quiet) makes no
coroutine for the name's check, the pool, the kept connection or the group's gathering.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
import pytest

from pgqueue import PgQueue
from tests.helpers import counting, run_closing

CALLS = 20

caller: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


@contextmanager
def _turns(loop: asyncio.AbstractEventLoop) -> Iterator[list[int]]:
    """Count the loop's turns (one ``select`` and the callbacks it made ready) in the block."""
    turns = [0]
    run_once: Callable[[], None] = loop._run_once  # type: ignore[attr-defined]

    def counted() -> None:
        turns[0] += 1
        run_once()

    loop._run_once = counted  # type: ignore[attr-defined]
    try:
        yield turns
    finally:
        del loop._run_once  # type: ignore[attr-defined]


@pytest.mark.parametrize("call", ["by name", "a task's own call"])
def test_an_async_single_enqueue_costs_the_loop_one_turn(pgq: PgQueue, call: str) -> None:
    @pgq.task(name="t")
    def t() -> None: ...

    async def enqueue() -> int:
        return await (pgq.enqueue_async("t", {}) if call == "by name" else t.enqueue_async())

    async def work() -> int:
        await enqueue()  # the pool opened, the socket watched
        with _turns(asyncio.get_running_loop()) as turns:
            for _ in range(CALLS):
                await enqueue()
        return turns[0]

    # (Two per call before: the reader's callback, then the task one turn later.)
    assert run_closing(pgq, work) <= CALLS + 2


def test_a_lone_async_call_through_the_group_commit_makes_no_future_of_its_own(
    pgq: PgQueue, monkeypatch
) -> None:
    @pgq.task(name="t")
    def t() -> None: ...

    async def work() -> int:
        await pgq.enqueue_async("t", {})
        with counting(monkeypatch, asyncio.get_running_loop(), "create_future") as made:
            for _ in range(CALLS):
                await pgq.enqueue_async("t", {})
        return made[0]

    # One per call: the statement's wait (two before: the group commit's call's too).
    assert run_closing(pgq, work) == CALLS


def test_the_task_woken_in_the_readers_turn_runs_as_itself(pgq: PgQueue) -> None:
    @pgq.task(name="t")
    def t() -> None: ...

    async def work() -> tuple[str, Any, type[BaseException]]:
        caller.set("the enqueuing task")
        await pgq.enqueue_async("t", {})
        job = await pgq.enqueue_async("t", {})
        assert job > 0
        seen = (caller.get(), sys.exc_info()[1])
        with pytest.raises(psycopg.Error) as failed:
            async with pgq.connection_async() as conn:
                await conn.execute("SELECT 1 / 0")
        return *seen, failed.type

    assert run_closing(pgq, work) == ("the enqueuing task", None, psycopg.errors.DivisionByZero)


def test_the_common_async_call_makes_no_coroutine_beside_its_statements_path(
    pgq: PgQueue, monkeypatch
) -> None:
    @pgq.task(name="t")
    def t() -> None: ...

    def watched() -> list[tuple[object, str]]:
        pools, group = pgq._pools, pgq._group_commit
        return [
            (pgq, "require_tasks_async"),
            (pools, "_open_pool_async"),
            (pools, "_checkout_async"),
            (pools, "_checkin_async"),
            (group, "_gather_async"),
        ]

    async def work() -> dict[str, int]:
        await t.enqueue_async()
        counts: dict[str, list[int]] = {}
        with ExitStack() as stack:
            for owner, name in watched():
                counts[name] = stack.enter_context(counting(monkeypatch, owner, name))
            for _ in range(CALLS):
                await t.enqueue_async()
        return {name: made[0] for name, made in counts.items()}

    # (One of each per call before.)
    assert run_closing(pgq, work) == dict.fromkeys(
        ["require_tasks_async", "_open_pool_async", "_checkout_async", "_checkin_async",
         "_gather_async"], 0
    )  # fmt: skip


def test_a_loops_group_takes_its_lock_without_python_code(pgq: PgQueue) -> None:
    """The lock a loop's tasks share their group under is never waited for (nothing awaits
    while holding it): a C-level lock, where ``nullcontext`` ran two Python methods per use,
    four uses per call."""

    @pgq.task(name="t")
    def t() -> None: ...

    async def work() -> int:
        await t.enqueue_async()
        ran: list[str] = []

        def profile(frame: Any, event: str, _: Any) -> None:
            if event == "call" and frame.f_code.co_filename == contextlib.__file__:
                ran.append(frame.f_code.co_name)

        sys.setprofile(profile)
        try:
            for _ in range(CALLS):
                await t.enqueue_async()
        finally:
            sys.setprofile(None)
        return len(ran)

    assert run_closing(pgq, work) == 0  # (160 before: eight per call)

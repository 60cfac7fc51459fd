"""What a sync single enqueue runs besides its statement: counted, not timed.

The common call (a registered task or its name, no options, no ``conn=``, nothing in flight)
takes the connection the client kept (:mod:`pgqueue.client.kept`, none of psycopg_pool's code),
commits at once through the group commit without making a call of the group's or a wait for
room, and drives its plan without the error translation's context manager. The async call
shares all of it but the wait.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest

from pgqueue import PgQueue
from pgqueue.client import commit_group, names, pools, room
from tests.helpers import counting, run_closing

CALLS = 20


def _calls(pgq: PgQueue, how: str) -> Any:
    @pgq.task(name="t")
    def t() -> None: ...

    return (lambda: pgq.enqueue("t", {})) if how == "by name" else t.enqueue


@pytest.mark.parametrize("how", ["by name", "a task's own call"])
def test_a_sync_single_enqueue_runs_few_python_calls_of_pgqueue_and_its_pool(
    pgq: PgQueue, how: str
) -> None:
    call = _calls(pgq, how)
    call()
    ran = [0]

    def profile(frame: Any, event: str, _: Any) -> None:
        if event == "call":
            where = frame.f_code.co_filename
            if "pgqueue" in where or "psycopg_pool" in where or "logging" in where:
                ran[0] += 1

    sys.setprofile(profile)
    try:
        for _ in range(CALLS):
            call()
    finally:
        sys.setprofile(None)
    # 67-69 per call before (psycopg_pool's getconn and putconn and their logging 21, the
    # group's call, join, gather and wait for room 11, the plan's helpers 4, ...); 31-33 now.
    assert ran[0] <= 34 * CALLS


@pytest.mark.parametrize("side", ["sync", "async"])
def test_a_lone_call_makes_nothing_of_the_groups_and_no_wait_for_room(
    pgq: PgQueue, monkeypatch: pytest.MonkeyPatch, side: str
) -> None:
    @pgq.task(name="t")
    def t() -> None: ...

    watched = {
        "a wait for room": (room.Room, "__init__"),
        "a call of the group's": (commit_group.Call, "__init__"),
        "a join": (commit_group.Group, "join"),
    }

    @contextmanager
    def counted() -> Iterator[dict[str, list[int]]]:
        with ExitStack() as stack:
            yield {
                what: stack.enter_context(counting(monkeypatch, *on))
                for what, on in watched.items()
            }

    if side == "sync":
        t.enqueue()
        with counted() as counts:
            for _ in range(CALLS):
                t.enqueue()
    else:

        async def work() -> dict[str, list[int]]:
            await t.enqueue_async()
            with counted() as counts:
                for _ in range(CALLS):
                    await t.enqueue_async()
            return counts

        counts = run_closing(pgq, work)
    # (CALLS of each before.)
    assert {what: made[0] for what, made in counts.items()} == dict.fromkeys(watched, 0)


def test_a_pooled_plan_enters_no_context_manager_to_translate_its_errors(
    pgq: PgQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    @pgq.task(name="t")
    def t() -> None: ...

    t.enqueue()
    with counting(monkeypatch, pools._Translated, "__enter__") as entered:
        for _ in range(CALLS):
            t.enqueue()
    assert entered[0] == 0  # (CALLS before)


def test_a_full_queue_still_fails_a_lone_call_with_its_error(pgq: PgQueue) -> None:
    """A call without ``wait_if_full`` skips the wait for room: the refusal is its error."""
    from pgqueue import QueueFullError

    @pgq.task(name="t", queue="bounded")
    def t() -> None: ...

    pgq.flow.configure_queue("bounded", max_depth=1)
    t.enqueue()
    with pytest.raises(QueueFullError):
        t.enqueue()
    with pytest.raises(QueueFullError):
        t.options(wait_if_full=0.05).enqueue()


def test_the_argument_check_of_a_call_by_name_runs_no_python_code_of_its_own(
    pgq: PgQueue,
) -> None:
    """The names a task takes and needs are read from its signature once, not per call."""

    @pgq.task(name="t")
    def t(x: int, y: int = 0) -> None: ...

    pgq.enqueue("t", {"x": 1})
    ran: list[str] = []

    def profile(frame: Any, event: str, _: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_filename in (names.__file__, inspect.__file__):
            ran.append(code.co_name)

    sys.setprofile(profile)
    try:
        for _ in range(CALLS):
            pgq.enqueue("t", {"x": 1})
    finally:
        sys.setprofile(None)
    assert ran == ["check_arguments"] * CALLS  # (with `parameters` and a generator before)

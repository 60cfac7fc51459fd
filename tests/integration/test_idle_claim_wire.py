"""What an idle worker's claim sends before its rows come back: the claim alone (after
``generic_plans``), no ``BEGIN``, no ``COMMIT``, no ``next_due`` (each was a statement more,
sent on its own, on the way from a NOTIFY to the handler); the pipeline's Sync commits it
once the rows are here, and ``next_due`` follows the commit. And a claim whose rows never
reach the worker is not committed."""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import pq

from benchmarks.claim_plans import claim_params
from pgqueue.worker import store
from pgqueue.worker.store import WorkerDB


def _traced_claim(dsn: str, queue: str, trace: Path) -> tuple[list[Any], list[Any]]:
    """An idle claim on a one-connection pool whose connection writes libpq's trace of the
    protocol messages to ``trace``."""

    async def go() -> tuple[list[Any], list[Any]]:
        db = WorkerDB(dsn, size=1)
        await db.open()
        try:
            with trace.open("w") as out:
                async with db.pool.connection() as conn:  # the one the claim gets
                    conn.pgconn.trace(out.fileno())
                    conn.pgconn.set_trace_flags(
                        pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE
                    )
                rows, due, commit = await db.before_commit(
                    "claim_jobs", "next_due", claim_params(queue, 10), generic=True
                )
                await commit
                return rows, await due
        finally:
            await db.close()

    return asyncio.run(go())


def _messages(trace: Path) -> list[tuple[str, str, str]]:
    """(direction, message type, the rest of its line) per protocol message of the trace (a
    statement's text goes on over the lines after a Parse's)."""
    messages = []
    for line in trace.read_text().splitlines():
        fields = line.split("\t", 3)
        if len(fields) >= 3 and fields[0] in ("F", "B"):
            messages.append((fields[0], fields[2], fields[3] if len(fields) > 3 else ""))
    return messages


def _first_word(parse: str) -> str:
    """A Parse message's statement's first word (after the statement's name, ``""``)."""
    match = re.match(r'\s*"[^"]*" "(\w+)', parse)
    assert match is not None, parse
    return match.group(1)


def test_an_idle_claim_sends_only_the_claim_before_its_rows(dsn, pgq, tmp_path):
    queue = f"q-{uuid.uuid4().hex[:6]}"
    job = pgq.enqueue("t", {}, queue=queue)
    rows, due = _traced_claim(dsn, queue, tmp_path / "trace")
    assert [row[0] for row in rows] == [job]
    assert due == [(None, False)]

    messages = _messages(tmp_path / "trace")
    words = [_first_word(text) for way, kind, text in messages if (way, kind) == ("F", "Parse")]
    assert words == ["SELECT", "WITH", "SELECT"]  # generic_plans, the claim, next_due
    first_row = messages.index(next(m for m in messages if m[:2] == ("B", "DataRow")))
    before_rows = [m for m in messages[:first_row] if m[0] == "F"]
    # generic_plans and the claim, then a Flush for the rows: nothing else, and no Sync yet.
    assert [kind for _, kind, _ in before_rows if kind in ("Execute", "Flush", "Sync")] == [
        "Execute",
        "Execute",
        "Flush",
    ]
    assert "plan_cache_mode" in before_rows[0][2]
    assert "candidates" in before_rows[4][2]
    # After the claim's rows: the Sync that commits it; next_due once the commit returned.
    after = messages[first_row:]
    assert next(kind for way, kind, _ in after if way == "F") == "Sync"
    next_due = after.index(next(m for m in after if m[:2] == ("F", "Parse")))
    assert "min(n.run_at)" in after[next_due][2]
    assert ("B", "ReadyForQuery") in [m[:2] for m in after[:next_due]]
    # The claim committed: the job is the worker's.
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)).fetchone()
    assert row == ("running",)


def test_a_claim_whose_rows_cannot_be_read_is_not_committed(dsn, pgq, monkeypatch):
    """Leaving the pipeline sends its Sync, which commits the implicit transaction: a claim
    whose rows the worker never got would hold its jobs until their leases ran out."""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    job = pgq.enqueue("t", {}, queue=queue)

    def unreadable(cursor: Any) -> Any:
        raise RuntimeError("rows that cannot be decoded")

    monkeypatch.setitem(store.ROWS_BY_NAME, "claim_jobs", unreadable)

    async def go() -> None:
        db = WorkerDB(dsn, size=1)
        await db.open()
        try:
            with pytest.raises(RuntimeError, match="cannot be decoded"):
                await db.before_commit(
                    "claim_jobs", "next_due", claim_params(queue, 10), generic=True
                )
            # The pool works on (the connection that held the claim was replaced).
            monkeypatch.undo()
            rows, due, commit = await db.before_commit(
                "claim_jobs", "next_due", claim_params(queue, 10), generic=True
            )
            await commit
            await due
            assert [row[0] for row in rows] == [job]
        finally:
            await db.close()

    with psycopg.connect(dsn) as conn:
        asyncio.run(go())
        attempts = conn.execute("SELECT attempts FROM pgqueue.jobs WHERE id = %s", (job,))
        assert attempts.fetchone() == (1,)  # claimed once: the first claim rolled back


def test_the_commits_task_is_waiting_on_the_socket_when_the_rows_are_returned(dsn, pgq):
    """Its first step came after the jobs' hand-over, while a ``def`` handler's thread waited
    for the GIL: on Python 3.12+ it has run (eagerly) before the rows are returned."""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    pgq.enqueue("t", {}, queue=queue)

    async def go() -> str:
        db = WorkerDB(dsn, size=1)
        await db.open()
        try:
            _, due, commit = await db.before_commit(
                "claim_jobs", "next_due", claim_params(queue, 10), generic=True
            )
            # Done already (the commit's reply was there in its eager step): it ran, and its
            # coroutine is gone (get_coro() is None, and crashes early CPython 3.12 releases).
            state = (
                inspect.CORO_CLOSED
                if commit.done()
                else inspect.getcoroutinestate(commit.get_coro())  # type: ignore[arg-type]
            )
            await commit
            await due
            return state
        finally:
            await db.close()

    ran = {inspect.CORO_SUSPENDED, inspect.CORO_CLOSED}
    assert asyncio.run(go()) in (ran if sys.version_info >= (3, 12) else {inspect.CORO_CREATED})


def test_a_psycopg_without_the_pipelines_private_methods_still_claims(dsn, pgq, monkeypatch):
    """The Sync is sent through two methods of psycopg's pipeline that are not its public API;
    without them the claim commits through the public ``sync()``, which waits for the commit."""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    job = pgq.enqueue("t", {}, queue=queue)
    assert store._SYNC_UNWAITED  # this psycopg has them
    monkeypatch.setattr(store, "_SYNC_UNWAITED", False)
    rows, due = _traced_claim(dsn, queue, Path("/dev/null"))
    assert [row[0] for row in rows] == [job] and due == [(None, False)]
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM pgqueue.jobs WHERE id = %s", (job,)).fetchone()
    assert row == ("running",)

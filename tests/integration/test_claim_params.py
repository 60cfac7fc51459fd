"""The idle claim's cost on the way from a NOTIFY to a handler: its list parameters go as array
literals (pgqueue/worker/array_params.py), whatever the names hold, and its flow-control check
is part of its plan, not a function call per claim (migration 0025)."""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from pgqueue.db.queries import query
from pgqueue.worker.store import WorkerDB

#: Names an array literal must quote: a comma, braces, quotes, a backslash, a space, the word
#: NULL, an empty string, non-ASCII.
ODD = ["a,b", "{c}", 'd"e', "f\\g", "h i", "NULL", "", "ü"]


def _params(queues: list[str], tasks: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "queues": queues,
        "tasks": tasks,
        "limit": 10,
        "worker_id": str(uuid.uuid4()),
        "lease": timedelta(seconds=30),
        "running": [0] * len(queues),
        "after_priority": [None] * len(queues),
        "after_run_at": [None] * len(queues),
        "after_id": [None] * len(queues),
        **extra,
    }


def _run(dsn: str, call: Any) -> Any:
    async def go() -> Any:
        db = WorkerDB(dsn, size=2)
        await db.open()
        try:
            return await call(db)
        finally:
            await db.close()

    return asyncio.run(go())


@pytest.mark.parametrize("early", [False, True])
def test_claims_take_jobs_of_queues_and_tasks_with_any_name(dsn, pgq, early):
    queues = [f"q-{uuid.uuid4().hex[:6]}-{name}" for name in ODD]
    tasks = [f"t{name}" for name in ODD]
    jobs = {
        pgq.enqueue(task, {}, queue=queue): task for queue, task in zip(queues, tasks, strict=True)
    }
    jobs[pgq.enqueue(tasks[0], {}, queue=queues[1])] = tasks[0]  # a listed task, another queue
    listed = [task for task in tasks if task != tasks[1]] + ['t"other']
    params = _params(queues, listed, limit=20)

    async def claim(db: WorkerDB) -> list[Any]:
        if not early:
            return await db.fetch("claim_jobs", params)
        rows, due, commit = await db.before_commit("claim_jobs", "next_due", params, generic=True)
        assert (await due)[0][1] is False  # flow control does not apply
        await commit
        return rows

    claimed = {row[0] for row in _run(dsn, claim)}
    assert claimed == {job_id for job_id, task in jobs.items() if task in listed}


def test_a_claim_walks_after_the_cursors_key(dsn, pgq, conn):
    queue = f"q-{uuid.uuid4().hex[:6]}"
    first, second = pgq.enqueue("t", {}, queue=queue), pgq.enqueue("t", {}, queue=queue)
    row = conn.execute(
        "SELECT priority, run_at, id FROM pgqueue.jobs WHERE id = %s", (first,)
    ).fetchone()
    assert row is not None
    after = {"after_priority": [row[0]], "after_run_at": [row[1]], "after_id": [row[2]]}
    rows = _run(dsn, lambda db: db.fetch("claim_jobs", _params([queue], ["t"], **after)))
    assert [r[0] for r in rows] == [second]  # the key's own job is not walked again


def test_claim_parameters_go_as_array_literals(dsn, pgq, monkeypatch):
    """psycopg dumps lists element by element in Python: 0.1-0.15 ms per claim on the path
    from a NOTIFY to the handler."""
    sent: list[dict[str, Any]] = []
    execute = psycopg.AsyncCursor.execute

    async def spy(self: Any, statement: Any, params: Any = None, **kwargs: Any) -> Any:
        if isinstance(params, dict) and "after_id" in params:
            sent.append(params)
        return await execute(self, statement, params, **kwargs)

    monkeypatch.setattr(psycopg.AsyncCursor, "execute", spy)
    params = _params(["a,b", "c"], ["t"])

    async def both(db: WorkerDB) -> None:
        await db.fetch("claim_jobs", params)
        _, due, commit = await db.before_commit("claim_jobs", "next_due", params, generic=True)
        await due
        await commit

    _run(dsn, both)
    assert len(sent) == 3  # claim_jobs, then claim_jobs and (after its commit) next_due
    for each in sent:
        assert each["queues"] == '{"a,b","c"}'
        assert each["tasks"] == '{"t"}'
        assert each["after_id"] == "{NULL,NULL}"
    assert params["queues"] == ["a,b", "c"]  # the caller's dict is left as it was


#: Literal values for the claim path's parameters, for EXPLAIN of a prepared statement.
VALUES = {
    "queues": "'{default}'::text[]",
    "tasks": "'{noop}'::text[]",
    "limit": "10",
    "lease": "'30 s'::interval",
    "worker_id": f"'{uuid.uuid4()}'::uuid",
    "after_priority": "'{NULL}'::smallint[]",
    "after_run_at": "'{NULL}'::timestamptz[]",
    "after_id": "'{NULL}'::bigint[]",
}


def _generic_plan(conn: psycopg.Connection[Any], name: str) -> str:
    """EXPLAIN of query ``name``'s generic plan (the plan the claim runs), rolled back."""
    sql, names = _positional(query(name))
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE check_plan AS {sql}", prepare=False)
        arguments = ", ".join(VALUES[n] for n in names)
        explain = f"EXPLAIN (VERBOSE, COSTS OFF) EXECUTE check_plan({arguments})"
        plan = "\n".join(row[0] for row in conn.execute(explain, prepare=False))
        conn.execute("DEALLOCATE check_plan", prepare=False)
    return plan


def test_the_claims_flow_control_check_is_inlined(conn):
    """A scalar SQL function whose body holds sub-selects is never inlined: claim_jobs called
    flow_controlled through the function manager on every claim."""
    for name in ("claim_jobs", "next_due"):
        plan = _generic_plan(conn, name)
        assert "flow_controlled" not in plan and "flow_controls" not in plan, plan
        assert "circuit_breakers" in plan  # the check is there, inlined


def test_the_claims_generic_plan_finds_its_jobs_by_primary_key_in_a_large_table(conn):
    """The generic plan cannot know how many rows LIMIT lets through: joined to the candidates,
    the UPDATE read the whole table sequentially (13 ms per claim with 48,000 jobs waiting,
    against 0.8 ms)."""
    with conn.transaction(force_rollback=True):
        conn.execute(
            "INSERT INTO pgqueue.jobs (queue, task)"
            " SELECT 'deep', 'noop' FROM generate_series(1, 20000)"
        )
        conn.execute("ANALYZE pgqueue.jobs")
        plan = _generic_plan(conn, "claim_jobs")
    assert "Seq Scan on pgqueue.jobs" not in plan, plan
    assert re.search(r"Index Scan using jobs_pkey on pgqueue\.jobs j$", plan, re.M), plan


def _positional(sql: str) -> tuple[str, list[str]]:
    """The query with its named placeholders as $1, $2, ... in order of first use, and their
    names in that order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%\((\w+)\)s", number, sql), names


def test_a_busy_workers_claims_run_their_generic_plan(dsn, pgq):
    """PostgreSQL keeps choosing a custom plan for the claim (the generic one's estimate looks
    dearer), so a prepared claim sent on its own was planned again on every call: 0.4-0.7 ms
    of a busy worker's claim. The claim now runs its generic plan, as the idle claim does."""
    queue = f"q-{uuid.uuid4().hex[:6]}"
    for n in range(12):
        pgq.enqueue("t", {"n": n}, queue=queue)

    async def claims(db: WorkerDB) -> tuple[int, int, int]:
        claimed = 0
        for _ in range(12):
            claimed += len(await db.fetch("claim_jobs", _params([queue], ["t"], limit=1)))
        async with db.pool.connection() as conn:  # the pool's one connection: the same session
            cur = await conn.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE statement LIKE '%%candidates%%'",
                prepare=False,
            )
            [(generic, custom)] = await cur.fetchall()
            status = conn.info.transaction_status
        assert status == psycopg.pq.TransactionStatus.IDLE
        return claimed, generic, custom

    async def go() -> tuple[int, int, int]:
        db = WorkerDB(dsn, size=1)
        await db.open()
        try:
            return await claims(db)
        finally:
            await db.close()

    claimed, generic, custom = asyncio.run(go())
    assert claimed == 12
    # psycopg prepares a statement at its sixth run; every run after that is a plan choice.
    assert generic >= 6 and custom == 0, (generic, custom)

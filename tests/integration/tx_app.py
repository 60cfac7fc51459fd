"""Tasks for the ``ctx.transaction()`` tests, run by an in-process worker (async handlers and sync
ones in threads, queue ``tx``) and by ``pgq work --pool process`` (queue ``tx_proc``):

    pgq work tests.integration.tx_app:pgq --pool process --queue tx_proc

The effect of every job is a row in ``tx_effects`` written in the job's transaction; whatever a
handler does outside it (a marker that it got somewhere) goes to ``ledger`` on a connection of
its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from functools import cache
from typing import Any

import psycopg
from sqlalchemy import BigInteger, Engine, Integer, Text, create_engine, insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pgqueue import ConstantBackoff, PgQueue, current_job

pgq = PgQueue()
QUICK = ConstantBackoff(0.05)  # retries at once: the tests wait for them

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS public.tx_effects (
    id      bigserial PRIMARY KEY,
    job_id  bigint NOT NULL,
    attempt integer NOT NULL,
    via     text NOT NULL,
    pid     integer
)
"""
INSERT = "INSERT INTO tx_effects (job_id, attempt, via, pid) VALUES (%s, %s, %s, %s)"


def _dsn() -> str:
    return os.environ["PGQUEUE_DSN"]


def mark(event: str, note: str | None = None) -> None:
    """Outside the job's transaction: committed at once, whatever becomes of it."""
    ctx = current_job()
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger (job_id, attempt, pid, worker, event, note)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (ctx.id, ctx.attempt, os.getpid(), ctx.worker_id, event, note),
        )


def _still_held() -> bool:
    ctx = current_job()
    with psycopg.connect(_dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT state = 'running' AND lease_token = %s FROM pgqueue.jobs WHERE id = %s",
            (ctx.job.lease_token, ctx.id),
        ).fetchone()
    return bool(row and row[0])


def _wait_until_taken(timeout: float = 30.0) -> None:
    """Until the test has taken the job away (reaped its lease)."""
    deadline = time.monotonic() + timeout
    while _still_held() and time.monotonic() < deadline:
        time.sleep(0.02)


def _effect(conn: psycopg.Connection[Any], via: str) -> None:
    ctx = current_job()
    conn.execute(INSERT, (ctx.id, ctx.attempt, via, os.getpid()))


async def _effect_async(conn: psycopg.AsyncConnection[Any], via: str) -> None:
    ctx = current_job()
    await conn.execute(INSERT, (ctx.id, ctx.attempt, via, os.getpid()))


# -- the worker's own connection -------------------------------------------------------------


@pgq.task(name="tx.sync", queue="tx", result_ttl=3600, backoff=QUICK)
def sync_effect(
    result: Any = None, raise_in: bool = False, raise_after: bool = False, again: bool = False,
    hold: float = 0.0, then_sleep: float = 0.0, returns: Any = None,
) -> Any:  # fmt: skip
    ctx = current_job()
    with ctx.transaction() as conn:
        _effect(conn, "sync")
        if result is not None:
            ctx.set_result(result)
        if hold:
            mark("holding")
            time.sleep(hold)
        if raise_in and ctx.attempt == 1:
            raise RuntimeError("failed inside the block")
    if then_sleep:
        time.sleep(then_sleep)
        mark("after", "cancelled" if ctx.cancelled else "running")
    if again:
        with ctx.transaction() as conn:
            _effect(conn, "second block")
    if raise_after:
        raise RuntimeError("failed after the block")
    return returns


@pgq.task(name="tx.async", queue="tx", result_ttl=3600, backoff=QUICK)
async def async_effect(
    result: Any = None, raise_in: bool = False, hold: float = 0.0, then_sleep: float = 0.0
) -> None:
    ctx = current_job()
    async with ctx.transaction() as conn:
        await _effect_async(conn, "async")
        if result is not None:
            ctx.set_result(result)
        if hold:
            await asyncio.to_thread(mark, "holding")
            await asyncio.sleep(hold)
        if raise_in and ctx.attempt == 1:
            raise RuntimeError("failed inside the block")
    if then_sleep:
        await asyncio.sleep(then_sleep)
        await asyncio.to_thread(mark, "after", "cancelled" if ctx.cancelled else "running")


@pgq.task(name="tx.lost", queue="tx", backoff=QUICK)
def lost_lease(orm: bool = False) -> None:
    """The first attempt's lease is taken away while its block is open (``orm``: the block is
    a SQLAlchemy session's, whose pending write is flushed before the completion)."""
    ctx = current_job()
    try:
        with contextlib.ExitStack() as stack:
            if orm:
                session = stack.enter_context(Session(_engines()[0]))
                stack.enter_context(ctx.transaction(conn=session))
                session.add(SqlEffect(job_id=ctx.id, attempt=ctx.attempt, via="sqlalchemy"))
            else:
                _effect(stack.enter_context(ctx.transaction()), "sync")
            if ctx.attempt == 1:
                mark("waiting")
                _wait_until_taken()
    except Exception as exc:
        mark("raised", type(exc).__name__)
        raise


@pgq.task(name="tx.async_lost", queue="tx", backoff=QUICK)
async def async_lost_lease() -> None:
    ctx = current_job()
    try:
        async with ctx.transaction() as conn:
            await _effect_async(conn, "async")
            if ctx.attempt == 1:
                await asyncio.to_thread(mark, "waiting")
                await asyncio.to_thread(_wait_until_taken)
    except BaseException as exc:
        await asyncio.to_thread(mark, "raised", type(exc).__name__)
        raise


@pgq.task(name="tx.limited", queue="tx", backoff=QUICK)
def limited(hold: float = 0.0) -> None:
    with current_job().transaction() as conn:
        _effect(conn, "limited")
        if hold:
            mark("holding")
            time.sleep(hold)


# -- the application's connections -----------------------------------------------------------


@cache
def _django_effect() -> Any:
    from django.db import models

    class Effect(models.Model):
        job_id = models.BigIntegerField()
        attempt = models.IntegerField()
        via = models.TextField()
        pid = models.IntegerField(null=True)

        class Meta:
            app_label = "tx_tests"
            db_table = "tx_effects"
            managed = False

    return Effect


@pgq.task(name="tx.django", queue="tx", backoff=QUICK)
def django_effect(raise_in: bool = False) -> None:
    from django.db import connection

    effect = _django_effect()
    ctx = current_job()
    try:
        with ctx.transaction(conn=connection) as conn:
            assert conn is connection
            effect.objects.create(job_id=ctx.id, attempt=ctx.attempt, via="django")
            if raise_in and ctx.attempt == 1:
                raise RuntimeError("failed inside the block")
    finally:
        connection.close()  # as Django does at the end of a request


class _Base(DeclarativeBase):
    pass


class SqlEffect(_Base):
    __tablename__ = "tx_effects"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger)
    attempt: Mapped[int] = mapped_column(Integer)
    via: Mapped[str] = mapped_column(Text)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)


@cache
def _engines() -> tuple[Engine, AsyncEngine]:
    dsn = _dsn()
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    async_engine = create_async_engine(
        "postgresql+psycopg://", async_creator=lambda: psycopg.AsyncConnection.connect(dsn)
    )
    return engine, async_engine


@pgq.task(name="tx.sqlalchemy", queue="tx", backoff=QUICK)
def sqlalchemy_effect(raise_in: bool = False, core: bool = False) -> None:
    engine, _ = _engines()
    effect = SqlEffect
    ctx = current_job()
    if core:
        with engine.connect() as connection, ctx.transaction(conn=connection):
            connection.execute(
                insert(effect).values(job_id=ctx.id, attempt=ctx.attempt, via="sqlalchemy core")
            )
        return
    with Session(engine) as session, ctx.transaction(conn=session) as conn:
        assert conn is session
        session.add(effect(job_id=ctx.id, attempt=ctx.attempt, via="sqlalchemy"))
        if raise_in and ctx.attempt == 1:
            raise RuntimeError("failed inside the block")


@pgq.task(name="tx.sqlalchemy_async", queue="tx", backoff=QUICK)
async def sqlalchemy_async_effect(core: bool = False) -> None:
    _, async_engine = _engines()
    effect = SqlEffect
    ctx = current_job()
    if core:
        async with async_engine.connect() as connection, ctx.transaction(conn=connection):
            await connection.execute(
                insert(effect).values(
                    job_id=ctx.id, attempt=ctx.attempt, via="sqlalchemy async core"
                )
            )
        return
    async with AsyncSession(async_engine) as session, ctx.transaction(conn=session):
        session.add(effect(job_id=ctx.id, attempt=ctx.attempt, via="sqlalchemy async"))


@pgq.task(name="tx.psycopg", queue="tx", backoff=QUICK)
def psycopg_effect(in_transaction: bool = False) -> None:
    ctx = current_job()
    with psycopg.connect(_dsn()) as connection:
        if in_transaction:
            connection.execute("SELECT 1")  # the connection's transaction is open now
        with ctx.transaction(conn=connection) as conn:
            _effect(conn, "psycopg")


@pgq.task(name="tx.psycopg_async", queue="tx", backoff=QUICK)
async def psycopg_async_effect() -> None:
    connection = await psycopg.AsyncConnection.connect(_dsn())
    async with connection, current_job().transaction(conn=connection) as conn:
        assert conn is connection
        await _effect_async(conn, "psycopg async")


# -- child processes (pgq work --pool process --queue tx_proc) ---------------------------------


@pgq.task(name="tx.proc", queue="tx_proc", result_ttl=3600, backoff=QUICK)
def proc_effect(result: Any = None, lose: bool = False, then_sleep: float = 0.0) -> None:
    ctx = current_job()
    with ctx.transaction() as conn:
        _effect(conn, "process")
        if result is not None:
            ctx.set_result(result)
        if lose and ctx.attempt == 1:
            mark("waiting")
            _wait_until_taken()
    if then_sleep:
        time.sleep(then_sleep)
        mark("after", "cancelled" if ctx.cancelled else "running")

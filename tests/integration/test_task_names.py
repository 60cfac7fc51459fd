"""Task names and arguments are checked where they are written: a misspelt name is refused with
the closest known names, before anything is written, in Python and from `pgq enqueue`; a
producer that never imports the task code accepts every name a worker declared."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import textwrap
from pathlib import Path

import psycopg
import pytest

from pgqueue import PgQueue
from pgqueue.errors import InvalidJobError, UnknownTaskError
from tests.helpers import PGQ, scalar

# Task names no module of the test process registers: only the worker process knows them.
APP_MODULE = """
from pgqueue import PgQueue

pgq = PgQueue()


@pgq.task(name="shop.tasks.build_report")
def build_report(user_id: int) -> None: ...


@pgq.task(name="shop.tasks.send_invoice")
def send_invoice(invoice_id: int) -> None: ...
"""


def run_pgq(*args: str, dsn: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGQUEUE_DSN", "DATABASE_URL")}
    return subprocess.run(
        [PGQ, *args], env={**env, "PGQUEUE_DSN": dsn}, cwd=cwd,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def declared(module_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A database whose worker (a real `pgq work --burst`) declared the shop's tasks."""
    app_dir = tmp_path_factory.mktemp("shop")
    (app_dir / "shop_app.py").write_text(textwrap.dedent(APP_MODULE))
    done = run_pgq("work", "shop_app:pgq", "--burst", dsn=module_dsn, cwd=app_dir)
    assert done.returncode == 0, done.stderr
    return module_dsn


def jobs(dsn: str, task: str) -> int:
    return int(scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE task = %s", (task,)))


def test_a_misspelt_name_is_refused_with_the_closest_names(declared):
    with PgQueue(declared) as pgq:
        with pytest.raises(UnknownTaskError) as raised:
            pgq.enqueue("shop.tasks.buidl_report", {"user_id": 1})
        message = str(raised.value)
        assert "'shop.tasks.buidl_report'" in message
        assert "did you mean 'shop.tasks.build_report'" in message
        assert raised.value.task == "shop.tasks.buidl_report"
        assert "--allow-unknown" not in message
        # A producer that never imported the task code enqueues every declared name.
        assert pgq.enqueue("shop.tasks.build_report", {"user_id": 1}) > 0
    assert jobs(declared, "shop.tasks.buidl_report") == 0


def test_pgq_enqueue_says_the_same_in_one_line(declared):
    done = run_pgq("enqueue", "shop.tasks.buidl_report", "--args", '{"user_id": 1}', dsn=declared)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "did you mean 'shop.tasks.build_report'" in lines[0]
    assert "--allow-unknown" in lines[0] and "allow_unknown=True" not in lines[0]
    assert jobs(declared, "shop.tasks.buidl_report") == 0
    ok = run_pgq("enqueue", "shop.tasks.send_invoice", "--args", '{"invoice_id": 7}', dsn=declared)
    assert ok.returncode == 0, ok.stderr
    later = run_pgq("enqueue", "shop.tasks.refund", "--allow-unknown", dsn=declared)
    assert later.returncode == 0, later.stderr
    assert jobs(declared, "shop.tasks.refund") == 1


def test_known_names_cost_no_query_and_a_miss_reads_the_declarations_once(declared):
    with PgQueue(declared) as pgq:

        @pgq.task(name="local.task")
        def local(n: int) -> None: ...

        local.enqueue(n=1)
        pgq.enqueue("local.task", {"n": 2})
        assert pgq._names.read_at is None  # registered here: no query at all
        pgq.enqueue("shop.tasks.send_invoice", {"invoice_id": 1})
        read_at = pgq._names.read_at
        assert read_at is not None
        for n in range(20):
            pgq.enqueue("shop.tasks.send_invoice", {"invoice_id": n})
        assert pgq._names.read_at == read_at  # cached: no more reads


def test_the_check_runs_no_statement_in_the_callers_transaction(declared):
    with PgQueue(declared) as pgq, psycopg.connect(declared) as conn:
        conn.execute("CREATE TEMP TABLE audit (note text)")
        conn.execute("INSERT INTO audit VALUES ('before')")
        with pytest.raises(UnknownTaskError):
            pgq.enqueue("shop.tasks.buidl_report", {}, conn=conn)
        # The caller's transaction goes on: nothing failed in it.
        job = pgq.enqueue("shop.tasks.build_report", {"user_id": 3}, conn=conn)
        assert conn.execute("SELECT count(*) FROM audit").fetchone() == (1,)
        conn.commit()
    assert scalar(declared, "SELECT count(*) FROM pgqueue.jobs WHERE id = %s", (job,)) == 1


def test_bulk_enqueue_checks_every_name_before_writing(declared):
    with PgQueue(declared) as pgq:
        good = pgq.spec("shop.tasks.send_invoice", {"invoice_id": 1}, {})
        bad = pgq.spec("shop.tasks.sned_invoice", {"invoice_id": 2}, {})
        before = jobs(declared, "shop.tasks.send_invoice")
        with pytest.raises(
            UnknownTaskError, match=re.escape("did you mean 'shop.tasks.send_invoice'")
        ):
            pgq.enqueue_many([good, bad])
        assert jobs(declared, "shop.tasks.send_invoice") == before


def test_async_enqueue_checks_names(declared):
    async def main() -> None:
        async with PgQueue(declared) as pgq:
            with pytest.raises(UnknownTaskError):
                await pgq.enqueue_async("shop.tasks.buidl_report", {})
            assert await pgq.enqueue_async("shop.tasks.build_report", {"user_id": 1}) > 0
            assert await pgq.enqueue_async("later.task", {}, allow_unknown=True) > 0

    asyncio.run(main())


def test_opting_out_accepts_a_task_deployed_later(declared):
    with PgQueue(declared, check_task_names=False) as pgq:
        assert pgq.enqueue("deployed.later", {}) > 0
        assert pgq.enqueue_many([pgq.spec("deployed.later", {}, {})])
    with PgQueue(declared) as pgq:
        assert pgq.enqueue("deployed.later", {}, allow_unknown=True) > 0


def test_argument_names_of_a_known_task_are_checked_at_enqueue(dsn):
    with PgQueue(dsn) as pgq:

        @pgq.task(name="reports.build")
        def build(user_id: int, *, full: bool = False) -> None: ...

        with pytest.raises(InvalidJobError) as raised:
            pgq.enqueue("reports.build", {"usr_id": 1, "color": "red"})
        message = str(raised.value)
        assert "unexpected 'usr_id', 'color'" in message
        assert "did you mean 'user_id'" in message
        assert "missing 'user_id'" in message
        assert "it takes user_id, full" in message
        assert pgq.enqueue("reports.build", {"user_id": 1, "full": True}) > 0
    assert jobs(dsn, "reports.build") == 1


def test_a_client_with_nothing_to_check_against_accepts_names(fresh_db):
    # No worker has declared anything here yet (a rolling upgrade: producers start first).
    with PgQueue(fresh_db) as pgq:
        pgq.migrate()
        assert pgq.enqueue("anything.at.all", {}) > 0

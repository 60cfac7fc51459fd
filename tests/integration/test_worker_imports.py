"""``pgq work`` loads only what running jobs needs: the other commands' modules (each is imported
when its command runs, pgqueue/cli/lazy.py) and what they use (rich's tables, the views, search,
migrations), the dashboard, metrics, cron parsing, tracing and Django stay unimported until used,
and so do ``--log-config``'s ``logging.config`` and ``--pool process``'s multiprocessing and
child processes' modules (the default runs plain functions on threads).

Checked in a real ``pgq work`` process: its first job writes its ``sys.modules`` to a file
(``tests/integration/startup_probe_app.py``). Start-up time itself is measured by
``python -m benchmarks.startup``, never asserted here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from pgqueue import PgQueue
from pgqueue.cli.app import Pgq
from tests.helpers import spawn_worker, stop_workers, wait_for

APP = "tests.integration.startup_probe_app:pgq"

#: Packages (and pgqueue modules) ``pgq work`` must not load for a plain ``def`` task with
#: default options: each is imported where it is used.
HEAVY = (
    "rich",  # the other commands' tables and colours
    "prometheus_client",  # only with --metrics-port
    "wsgiref",
    "http.server",
    "croniter",  # only when a cron schedule is parsed
    "dateutil",
    "opentelemetry",  # only with tracing installed and enabled
    "django",  # only in a Django project
    "alembic",  # only for pgq migrate
    "sqlalchemy",
    "jinja2",
    "pgqueue.dashboard",  # only for pgq dashboard
    "pgqueue.db.views",  # the read-only commands' queries
    "pgqueue.db.search",
    "pgqueue.db.pg_cron",
    "pgqueue.db.roles",
    "pgqueue.cli.demo",
    "pgqueue.cli.output",  # the commands' tables and --format
    "pgqueue.cli.listing",
    "pgqueue.cli.job_options",
    "pgqueue.cli.declared",  # options made from declarations: pgq enqueue's, pgq jobs search's
    "pgqueue.cli.search_cmd",
    "click",  # typer carries its own copy of click: the package is a dozen modules more
    # typer (0.29+) converts option values with pydantic; pgq work's are converted without it
    # where the result is certain (pgqueue/cli/plain_values.py).
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typer._adapters",
    "hashlib",  # only for unique_by keys (pgqueue.rules.dedupe)
    "logging.config",  # only with --log-config (it brings socketserver)
    "socketserver",
    # --pool process only: multiprocessing, the pool, the children's side and their frames.
    "multiprocessing",
    "pgqueue.worker.child_runtime",
    "pgqueue.worker.process_pool",
    "pgqueue.worker.child_process",
    "pgqueue.worker.child_handle",
    "pgqueue.worker.child",
    "pgqueue.worker.child_transactions",
    "pgqueue.worker.frames",
    "pgqueue.worker.pool_sizing",
    # Workflows: written by enqueue_workflow() and a job enqueued with depends_on, read by
    # workflow()/workflows(); pgqueue.DAG, chain, ... are loaded when first named.
    "pgqueue.rules.workflow",
    "pgqueue.db.workflow_plans",
    "pgqueue.db.workflow_views",
    # The maintenance service's queries and rules: its first pass is an interval after start.
    "pgqueue.db.maintenance",
    "pgqueue.db.horizon",
    "pgqueue.rules.maintenance",
    "pgqueue.db.migrate",  # only for pgq migrate, upgrade() and a schema too old or too new
    # Every other command's module (pgq work's own is worker_cmds).
    *sorted({lazy.module for lazy in Pgq.lazy.values()} - {"pgqueue.cli.worker_cmds"}),
)


#: What the housekeeping that starts with the first claim (the pruner, the reaper) loads: its
#: queries, imported when it first runs, beside the first job and not ahead of it. Checked with
#: those services off (their first pass would race the probe job).
HOUSEKEEPING = (
    "pgqueue.db.retention",  # the pruner's
    "pgqueue.db.admin",  # the reaper's (and the client's cancel, progress, dead letters)
)


def loaded(modules: list[str], name: str) -> list[str]:
    return [m for m in modules if m == name or m.startswith(name + ".")]


def first_job_modules(dsn: str, tmp_path: Path, *options: str) -> list[str]:
    """``sys.modules`` of a real ``pgq work`` given ``options``, read by its first job."""
    out = tmp_path / "modules.txt"
    log = tmp_path / "worker.log"
    worker: subprocess.Popen[bytes] = spawn_worker(dsn, *options, log=log, app=APP)
    try:
        client = PgQueue(dsn=dsn)
        try:
            client.enqueue("startup.modules", {"path": str(out)})
        finally:
            client.close()
        wait_for(
            lambda: out.exists() and out.read_text().endswith("\n"),
            timeout=60,
            message="the probe job to run",
        )
    finally:
        stop_workers([worker])
    modules = out.read_text().split()
    assert "pgqueue.worker" in modules  # the probe ran inside a real worker
    return modules


def test_pgq_work_import_path_leaves_heavy_modules_out(dsn: str, tmp_path: Path) -> None:
    # Options of every kind a deployment passes (a number, a duration, a name, a choice).
    options = ("--concurrency", "8", "--lease", "30", "--queue", "default", "--pool", "thread")
    modules = first_job_modules(dsn, tmp_path, *options)
    found = {name: loaded(modules, name)[:3] for name in HEAVY if loaded(modules, name)}
    assert found == {}, f"pgq work imported {found}"


def test_housekeeping_queries_are_not_on_the_start_path(dsn: str, tmp_path: Path) -> None:
    modules = first_job_modules(dsn, tmp_path, "--no-pruner", "--no-reaper")
    found = {name: loaded(modules, name)[:3] for name in HOUSEKEEPING if loaded(modules, name)}
    assert found == {}, f"pgq work imported {found}"

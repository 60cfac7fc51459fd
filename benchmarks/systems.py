"""The systems the comparison measures, and how to drive each one's benchmark driver.

Every system is driven through the same protocol (``benchmarks/drivers/protocol.py``): a
command line run as a subprocess, so all of them pay the same process and connection set-up
outside the timed sections, and the peers run from their own environments.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from psycopg.conninfo import conninfo_to_dict

from benchmarks import peers_env
from benchmarks.drivers import pgqueue_driver
from benchmarks.drivers.protocol import RESULT_PREFIX

ROOT = Path(__file__).resolve().parent.parent


def url(dsn: str) -> str:
    """``dsn`` as a postgresql:// URL: asyncpg and node-postgres take no key=value strings."""
    if "://" in dsn:
        return dsn
    params = conninfo_to_dict(dsn)
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    host = str(params.pop("host", "localhost"))
    port = params.pop("port", None)
    dbname = quote(str(params.pop("dbname", "")), safe="")
    if host.startswith("/"):  # a socket directory goes in the query string
        params["host"] = host
        host = ""
    netloc = f"{auth}{host}" + (f":{port}" if port else "")
    query = urlencode({k: str(v) for k, v in params.items()})
    return f"postgresql://{netloc}/{dbname}" + (f"?{query}" if query else "")


@dataclass
class System:
    key: str
    label: str
    #: The driver command before ``--dsn``; filled by :func:`available` (peers install lazily).
    prefix: list[str]
    #: True when at least one job is still waiting or running.
    pending_sql: str
    #: How many jobs are waiting (used to top up the deep queue).
    waiting_sql: str
    #: Empties the job tables between workloads.
    reset_sql: str
    #: Extra arguments of the driver's ``work`` command (before ``work``: driver options).
    work_options: list[str] = field(default_factory=list)
    description: str = ""

    def driver(self, dsn: str, *args: str) -> list[str]:
        return [*self.prefix, "--dsn", url(dsn), *args]

    def call(self, dsn: str, *args: str, timeout: float = 1800) -> dict[str, Any]:
        """Run one driver command and return its BENCH-RESULT (or {})."""
        done = subprocess.run(
            self.driver(dsn, *args),
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(dsn),
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{self.label} driver failed ({' '.join(args)}): exit {done.returncode}\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
        for line in reversed(done.stdout.splitlines()):
            if line.startswith(RESULT_PREFIX):
                import json

                return dict(json.loads(line[len(RESULT_PREFIX) :]))
        return {}

    def env(self, dsn: str) -> dict[str, str]:
        return {**os.environ, "PGQUEUE_DSN": url(dsn), "PYTHONUNBUFFERED": "1"}

    def work_command(self, dsn: str) -> list[str]:
        return self.driver(dsn, *self.work_options, "work")


@dataclass
class PgqueueSystem(System):
    concurrency: int = pgqueue_driver.DEFAULT_CONCURRENCY

    def work_command(self, dsn: str) -> list[str]:
        # pgqueue's worker is `pgq work` itself, exactly as users run it.
        return pgqueue_driver.work_command(sys.executable, self.concurrency)


def _python_prefix(python: str | Path, module: str) -> list[str]:
    return [str(python), "-m", f"benchmarks.drivers.{module}"]


RAW = System(
    key="raw",
    label="raw SQL",
    prefix=_python_prefix(sys.executable, "raw_driver"),
    pending_sql="SELECT EXISTS (SELECT 1 FROM raw_jobs)",
    waiting_sql="SELECT count(*) FROM raw_jobs",
    reset_sql="TRUNCATE raw_jobs",
    description=(
        "psycopg, no library: 1-row INSERT per transaction; 100-row INSERTs; claim 100 "
        "FOR UPDATE SKIP LOCKED + DELETE in one transaction, LISTEN when idle"
    ),
)


def pgqueue(concurrency: int) -> System:
    return PgqueueSystem(
        key="pgqueue",
        label="pgqueue",
        prefix=_python_prefix(sys.executable, "pgqueue_driver"),
        pending_sql="SELECT EXISTS (SELECT 1 FROM pgqueue.jobs)",
        waiting_sql="SELECT count(*) FROM pgqueue.jobs WHERE state IN ('ready', 'scheduled')",
        reset_sql="TRUNCATE pgqueue.jobs, pgqueue.job_history, pgqueue.dead_letters",
        concurrency=concurrency,
        description=(
            f"this tree: `pgq work --concurrency {concurrency}` (async no-op task), sync "
            "`enqueue` from threads, `enqueue_many` (COPY)"
        ),
    )


#: How the harness sees each peer's tables: (pending, waiting, reset) SQL.
_PEER_SQL = {
    "pgqueuer": (
        "SELECT EXISTS (SELECT 1 FROM pgqueuer)",
        "SELECT count(*) FROM pgqueuer WHERE status = 'queued'",
        "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics",
    ),
    "procrastinate": (
        "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))",
        "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'",
        "TRUNCATE procrastinate_jobs CASCADE",
    ),
}


def _python_peer(key: str, label: str, description: str, options: list[str]) -> System:
    pending, waiting, reset = _PEER_SQL[key]
    prefix = _python_prefix(peers_env.python(), f"{key}_driver")
    return System(key, label, prefix, pending, waiting, reset, options, description)


def pgqueuer() -> System:
    return _python_peer(
        "pgqueuer",
        "PgQueuer",
        "asyncpg + uvloop, 5 QueueManagers per process (own connections), batch_size 10 "
        "(its benchmark tool's settings); list `Queries.enqueue` for bulk",
        ["--consumers", "5", "--batch-size", "10"],
    )


def procrastinate() -> System:
    return _python_peer(
        "procrastinate",
        "Procrastinate",
        "psycopg pool, async task, worker concurrency 10, LISTEN/NOTIFY, "
        "delete_jobs=successful; `batch_defer_async` for bulk",
        [],
    )


def graphile() -> System:
    node = peers_env.node()
    return System(
        key="graphile",
        label="Graphile Worker",
        prefix=[node, str(peers_env.GRAPHILE / "driver.mjs")],
        pending_sql="SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)",
        waiting_sql="SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL",
        reset_sql="TRUNCATE graphile_worker._private_jobs CASCADE",
        description=(
            "Node, concurrentJobs 24, maxPoolSize 25, localQueue.size 500, "
            "completeJobBatchDelay 0, failJobBatchDelay 0 (its performance page); "
            "`addJobs` for bulk"
        ),
    )


ALL = ("raw", "pgqueue", "pgqueuer", "procrastinate", "graphile")


def build(keys: list[str], concurrency: int) -> list[System]:
    makers = {
        "raw": lambda: RAW,
        "pgqueue": lambda: pgqueue(concurrency),
        "pgqueuer": pgqueuer,
        "procrastinate": procrastinate,
        "graphile": graphile,
    }
    return [makers[key]() for key in keys]

"""The systems the comparison measures, and how to drive each one's benchmark driver.

Every system is driven through the same protocol (``benchmarks/drivers/protocol.py``): a
command line run as a subprocess, so all of them pay the same process and connection set-up
outside the timed sections, and the peers run from their own environments.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from benchmarks import peers_env, redis_server, statements
from benchmarks.drivers import jobs, pgqueue_driver
from benchmarks.drivers.protocol import RESULT_PREFIX, TASKS

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
    #: How many jobs are due and not finished (the steady load's backlog).
    backlog_sql: str = ""
    #: The job kinds its driver runs (``protocol.TASKS``).
    kinds: tuple[str, ...] = TASKS
    #: Whether its driver has ``schedule`` (jobs due later).
    schedules: bool = True
    #: Whether it has a batch enqueue API (``bulk`` loops over single enqueues otherwise).
    batch_api: bool = True
    #: The table the comparison prints it in, and the pgqueue system its ratios divide by.
    table: str = "postgres"
    compare_with: str = "pgqueue"
    #: Options of the driver's ``work`` command giving the number of job slots.
    slots_options: tuple[str, ...] = ("--concurrency",)
    #: The directory its worker runs in (another checkout: the code found there is measured).
    root: Path = ROOT

    def driver(self, dsn: str, *args: str) -> list[str]:
        return [*self.prefix, "--dsn", url(dsn), *args]

    # The harness's view of the queue (SQL here; the Redis peers read their broker).
    def _scalar(self, dsn: str, query: str) -> Any:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(statements.harness(query)).fetchone()
        return row[0] if row else None

    def pending(self, dsn: str) -> bool:
        """At least one job still waiting or running."""
        return bool(self._scalar(dsn, self.pending_sql))

    def waiting(self, dsn: str) -> int:
        return int(self._scalar(dsn, self.waiting_sql) or 0)

    def backlog(self, dsn: str) -> int:
        return int(self._scalar(dsn, self.backlog_sql or self.waiting_sql) or 0)

    def reset(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(statements.harness(self.reset_sql))
            conn.execute(statements.harness("TRUNCATE bench_rows"))

    def setup(self, dsn: str) -> None:
        """The system's schema, and the application table the row jobs write to."""
        self.call(dsn, "setup")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(jobs.DDL)

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
        return {
            **os.environ,
            "PGQUEUE_DSN": url(dsn),
            "BENCH_APP_DSN": url(dsn),
            "PYTHONUNBUFFERED": "1",
        }

    def work_command(self, dsn: str, slots: int | None = None) -> list[str]:
        extra = (
            [arg for option in self.slots_options for arg in (option, str(slots))] if slots else []
        )
        return self.driver(dsn, *self.work_options, "work", *extra)


@dataclass
class PgqueueSystem(System):
    concurrency: int = pgqueue_driver.DEFAULT_CONCURRENCY

    def work_command(self, dsn: str, slots: int | None = None) -> list[str]:
        # pgqueue's worker is `pgq work` itself, exactly as users run it.
        return pgqueue_driver.work_command(sys.executable, slots or self.concurrency)


@dataclass
class PgqueueApiSystem(PgqueueSystem):
    """pgqueue's worker embedded through the Python API (``Worker(app, settings).run_sync()``
    in the driver's ``work``), as the peers' drivers embed theirs: ``benchmarks.startup``."""

    def work_command(self, dsn: str, slots: int | None = None) -> list[str]:
        return self.driver(dsn, "work", "--concurrency", str(slots or self.concurrency))


@dataclass
class CliSystem(System):
    """A peer whose worker is started by its own command-line tool, as its docs run one (the
    driver still sets up and enqueues): where :class:`System` runs the driver's ``work``, a
    Python script embedding the peer's worker. ``cli`` is the command after the interpreter's
    directory, ``{dsn}`` and ``{slots}`` filled in."""

    cli: tuple[str, ...] = ()

    def work_command(self, dsn: str, slots: int | None = None) -> list[str]:
        bin_dir = Path(self.prefix[0]).parent
        fill = {"dsn": url(dsn), "slots": str(slots or DEFAULT_PEER_SLOTS)}
        return [str(bin_dir / self.cli[0]), *(arg.format(**fill) for arg in self.cli[1:])]

    def env(self, dsn: str) -> dict[str, str]:
        # A console script does not put the working directory on sys.path: the job's module
        # (the driver) is found the way an installed application's would be.
        return {**super().env(dsn), "PYTHONPATH": str(self.root)}


@dataclass
class RedisSystem(System):
    """A peer whose jobs live in Redis (the harness's private server, one database each); the
    application table is in its PostgreSQL database like everyone's."""

    #: ``(command, key)`` pairs whose sum is the number of unfinished jobs ready to run...
    ready_keys: tuple[tuple[str, str], ...] = ()
    #: ... and of jobs due later.
    later_keys: tuple[tuple[str, str], ...] = ()
    database: int = 0
    redis: str = ""  # the server's URL, set by the harness once it runs

    @property
    def redis_url(self) -> str:
        if not self.redis:
            raise RuntimeError(f"{self.label}: no Redis server given")
        return f"{self.redis}/{self.database}"

    def _count(self, keys: tuple[tuple[str, str], ...]) -> int:
        with redis_server.Client(self.redis_url) as client:
            return sum(int(client.command(cmd, key) or 0) for cmd, key in keys)

    def pending(self, dsn: str) -> bool:
        return self._count(self.ready_keys + self.later_keys) > 0

    def waiting(self, dsn: str) -> int:
        return self._count(self.ready_keys)

    def backlog(self, dsn: str) -> int:
        return self._count(self.ready_keys)

    def reset(self, dsn: str) -> None:
        redis_server.command(self.redis_url, "FLUSHDB")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(statements.harness("TRUNCATE bench_rows"))

    def env(self, dsn: str) -> dict[str, str]:
        return {**super().env(dsn), "BENCH_REDIS_URL": self.redis_url}


def _python_prefix(python: str | Path, module: str) -> list[str]:
    return [str(python), "-m", f"benchmarks.drivers.{module}"]


RAW = System(
    kinds=("noop",),
    schedules=False,
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


RAW_LEASED = dataclasses.replace(
    RAW,
    key="raw_leased",
    label="raw SQL, leased",
    work_options=["--leased"],
    description=(
        "the raw ceiling's table, drained by a leased loop: one transaction claims 100 "
        "(SKIP LOCKED) and sets their lease, the jobs run, a second transaction deletes them"
    ),
)


def pgqueue(concurrency: int, sync: bool = False) -> System:
    prefix = _python_prefix(sys.executable, "pgqueue_driver")
    return PgqueueSystem(
        key="pgqueue_def" if sync else "pgqueue",
        label="pgqueue (def)" if sync else "pgqueue",
        prefix=[*prefix, "--sync-tasks"] if sync else prefix,
        pending_sql="SELECT EXISTS (SELECT 1 FROM pgqueue.jobs)",
        waiting_sql="SELECT count(*) FROM pgqueue.jobs WHERE state IN ('ready', 'scheduled')",
        backlog_sql="SELECT count(*) FROM pgqueue.jobs WHERE run_at <= now()",
        reset_sql="TRUNCATE pgqueue.jobs, pgqueue.job_history, pgqueue.dead_letters",
        concurrency=concurrency,
        table="both",
        description=(
            f"this tree: `pgq work --concurrency {concurrency}` ("
            + (
                "plain `def` no-op and row tasks on the worker's handler threads"
                if sync
                else "`async def` no-op and row tasks"
            )
            + "), sync `enqueue` from threads, `enqueue_many` (COPY)"
        ),
    )


#: How the harness sees each peer's tables: (pending, waiting, reset, backlog) SQL.
_PEER_SQL = {
    "pgqueuer": (
        "SELECT EXISTS (SELECT 1 FROM pgqueuer)",
        "SELECT count(*) FROM pgqueuer WHERE status = 'queued'",
        "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics",
        "SELECT count(*) FROM pgqueuer WHERE execute_after <= now()",
    ),
    "procrastinate": (
        "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs WHERE status IN ('todo', 'doing'))",
        "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'",
        "TRUNCATE procrastinate_jobs CASCADE",
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        " AND coalesce(scheduled_at, now()) <= now()",
    ),
    # Oban keeps finished jobs as 'completed' (its pruner deletes them after a day).
    "oban": (
        "SELECT EXISTS (SELECT 1 FROM oban_jobs WHERE state IN "
        "('available', 'scheduled', 'executing', 'retryable'))",
        "SELECT count(*) FROM oban_jobs WHERE state = 'available'",
        "TRUNCATE oban_jobs",
        "SELECT count(*) FROM oban_jobs WHERE state IN ('available', 'executing')"
        " AND scheduled_at <= now()",
    ),
    # Chancy writes a finished job's state back in batches (every second by default).
    "chancy": (
        "SELECT EXISTS (SELECT 1 FROM chancy_jobs WHERE state IN "
        "('pending', 'running', 'retrying'))",
        "SELECT count(*) FROM chancy_jobs WHERE state = 'pending'",
        "TRUNCATE chancy_jobs CASCADE",
        "SELECT count(*) FROM chancy_jobs WHERE state IN ('pending', 'running')"
        " AND scheduled_at <= now()",
    ),
}


def _python_peer(
    key: str, label: str, description: str, options: list[str], family: str = "postgres"
) -> System:
    pending, waiting, reset, backlog = _PEER_SQL[key]
    prefix = _python_prefix(peers_env.python(family), f"{key}_driver")
    return System(
        key,
        label,
        prefix,
        pending,
        waiting,
        reset,
        options,
        description,
        backlog,
        # Their drivers have the no-op job only so far: the steady load, not the 10 ms, row or
        # scheduled jobs.
        kinds=("noop",),
        schedules=False,
    )


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


def oban() -> System:
    return _python_peer(
        "oban",
        "Oban-py",
        "Oban-py 0.7 (`oban`), psycopg pool 1..10 (its default), one queue with limit 64, "
        "`async def process`, default 5 ms producer debounce, stager/pruner/lifeline on; "
        "`enqueue_many` for bulk",
        [],
        family="oban",
    )


def _fields(system: System, **changes: Any) -> dict[str, Any]:
    """``system``'s fields with ``changes``: the same system as another kind (its worker
    started another way)."""
    return {f.name: getattr(system, f.name) for f in dataclasses.fields(system)} | changes


def pgqueue_api(concurrency: int) -> System:
    """pgqueue's worker started through the Python API rather than ``pgq work``."""
    return PgqueueApiSystem(
        **_fields(pgqueue(concurrency), key="pgqueue_api", label="pgqueue `Worker` API")
    )


#: The job slots a peer's command-line worker gets (the drivers' ``work`` default).
DEFAULT_PEER_SLOTS = 64


def _as_cli(peer: System, key: str, label: str, cli: tuple[str, ...]) -> CliSystem:
    return CliSystem(**_fields(peer, key=key, label=label, cli=cli))


def oban_cli() -> System:
    """Oban-py's worker as ``oban start`` runs it (its queue and limit as ``--queues``); the
    job's worker module is imported when its first job runs."""
    return _as_cli(
        oban(),
        "oban_cli",
        "Oban-py `oban start`",
        ("oban", "start", "--dsn", "{dsn}", "--queues", "default:{slots}"),
    )


def chancy_cli() -> System:
    """Chancy's worker as ``chancy --app ... worker start`` runs it: the app is the driver's
    :func:`~benchmarks.drivers.chancy_driver.cli_app`, the queue as the driver's ``setup``
    declared it (64 slots, the same executor and polling)."""
    return _as_cli(
        chancy(),
        "chancy_cli",
        "Chancy `chancy worker start`",
        ("chancy", "--app", "benchmarks.drivers.chancy_driver.cli_app", "worker", "start"),
    )


def chancy() -> System:
    return _python_peer(
        "chancy",
        "Chancy",
        "Chancy 0.26, `AsyncExecutor` queue with concurrency 64, `eager_polling`, "
        "polling_interval 1 s + LISTEN/NOTIFY, default plugins; `push_many` for bulk",
        [],
        family="chancy",
    )


def graphile() -> System:
    node = peers_env.node()
    return System(
        key="graphile",
        label="Graphile Worker",
        prefix=[node, str(peers_env.GRAPHILE / "driver.mjs")],
        pending_sql="SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs)",
        waiting_sql="SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL",
        backlog_sql="SELECT count(*) FROM graphile_worker._private_jobs WHERE run_at <= now()",
        # Its driver has the no-op job only so far (and Node has no blocking sleep that leaves
        # the other jobs running, so no `sleep_sync` ever).
        kinds=("noop",),
        schedules=False,
        reset_sql="TRUNCATE graphile_worker._private_jobs CASCADE",
        description=(
            "Node, concurrentJobs 24, maxPoolSize 25, localQueue.size 500, "
            "completeJobBatchDelay 0, failJobBatchDelay 0 (its performance page); "
            "`addJobs` for bulk"
        ),
    )


#: Celery's Redis transport: the queue is a list, delivered-but-unacknowledged messages (and
#: every ETA task, which the worker holds until due) sit in the ``unacked`` hash.
_CELERY_KEYS = (("LLEN", "celery"), ("HLEN", "unacked"))


def celery(pool: str, database: int) -> System:
    threads = pool == "threads"
    return RedisSystem(
        key=f"celery_{pool}",
        label=f"Celery {pool}",
        prefix=[*_python_prefix(peers_env.python("redis"), "celery_driver"), "--pool", pool],
        pending_sql="",
        waiting_sql="",
        reset_sql="",
        table="redis",
        compare_with="pgqueue_def",
        kinds=("noop", "sleep_sync", "row"),  # no coroutine tasks
        ready_keys=_CELERY_KEYS,
        database=database,
        batch_api=False,
        description=(
            f"Celery 5.7, Redis broker, `--pool {pool}`, "
            + (
                "64 threads"
                if threads
                else "concurrency = cores (its default; 64 processes for the 10 ms jobs)"
            )
            + "; the throughput settings of its optimizing guide: `task_acks_late`, "
            "`worker_prefetch_multiplier` 64, `task_ignore_result` (no result backend), "
            "`worker_disable_rate_limits`, no gossip/mingle/heartbeat; `apply_async` "
            "(no batch API: the bulk row is left blank), no `async def` tasks"
        ),
    )


def dramatiq() -> System:
    return RedisSystem(
        key="dramatiq",
        label="Dramatiq",
        prefix=_python_prefix(peers_env.python("redis"), "dramatiq_driver"),
        pending_sql="",
        waiting_sql="",
        reset_sql="",
        table="redis",
        compare_with="pgqueue_def",
        ready_keys=(("HLEN", "dramatiq:default.msgs"),),
        later_keys=(("HLEN", "dramatiq:default.DQ.msgs"),),
        database=3,
        batch_api=False,
        description=(
            "Dramatiq 2.2, Redis broker, one worker process with 64 threads (`Worker` in "
            "process, as `dramatiq --processes 1 --threads 64`), its default prefetch "
            "(2 x threads), `AsyncIO` middleware for the `async def` actor; `send` "
            "(no batch API)"
        ),
    )


def arq() -> System:
    return RedisSystem(
        key="arq",
        label="arq",
        prefix=_python_prefix(peers_env.python("arq"), "arq_driver"),
        pending_sql="",
        waiting_sql="",
        reset_sql="",
        table="redis",
        compare_with="pgqueue",
        ready_keys=(("ZCARD", "arq:queue"),),
        database=4,
        batch_api=False,
        kinds=("noop", "sleep_async", "row"),  # coroutines only
        description=(
            "arq 0.28, `max_jobs` 64, `keep_result` 0, `poll_delay` 0.05 s (it polls Redis: "
            "no push), `async def` jobs only; `enqueue_job` (no batch API)"
        ),
    )


ALL = (
    "raw",
    "raw_leased",
    "pgqueue",
    "pgqueue_def",
    "pgqueuer",
    "procrastinate",
    "oban",
    "chancy",
    "graphile",
    "celery_prefork",
    "celery_threads",
    "dramatiq",
    "arq",
)


def build(keys: list[str], concurrency: int) -> list[System]:
    makers = {
        "raw": lambda: RAW,
        "raw_leased": lambda: RAW_LEASED,
        "pgqueue": lambda: pgqueue(concurrency),
        "pgqueue_def": lambda: pgqueue(concurrency, sync=True),
        "pgqueuer": pgqueuer,
        "procrastinate": procrastinate,
        "oban": oban,
        "chancy": chancy,
        # For benchmarks.startup: each worker started the other way (pgqueue's embedded, the
        # peers' by their own command-line tools).
        "pgqueue_api": lambda: pgqueue_api(concurrency),
        "oban_cli": oban_cli,
        "chancy_cli": chancy_cli,
        "graphile": graphile,
        "celery_prefork": lambda: celery("prefork", 1),
        "celery_threads": lambda: celery("threads", 2),
        "dramatiq": dramatiq,
        "arq": arq,
    }
    return [makers[key]() for key in keys]

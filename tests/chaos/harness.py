"""A Jepsen-style fault-injection harness for pgqueue, shared by ``pytest -m chaos`` (small sizes)
and ``benchmarks/chaos.py`` (full sizes).

A run: real ``pgq work`` processes (:mod:`tests.chaos.chaos_app`) drain jobs that each carry a
unique number ``n`` while a nemesis injects faults; then the harness heals, drains and checks.

What is recorded, and where:

* **Effects ledger** (``chaos_ledger``): every execution writes a start and an end row (job id,
  n, lease token, attempt, worker, pid, database time) on a connection of its own.
* **Transactional ledger** (``chaos_tx_ledger``, in the queue's database): with
  ``Settings.tx_every``, every such job also writes its effect in the transaction that completes
  it (``ctx.transaction()``), after its plain end record: the same executions seen both ways.
* **Queue audit** (``chaos_done``, ``chaos_violations``): a trigger on ``pgqueue.jobs`` sees
  every write the database accepted and who issued it (each worker connection names its worker
  in ``application_name``). A job leaving the table is recorded in ``chaos_done``. A write that
  only a lease holder may make, accepted from anyone else while the lease was live (an ack, a
  heartbeat, a retry, a release), or any write to a job nobody holds, is a violation: a stale
  write accepted. The reaper's writes are the one exception (only on expired leases, never
  extending them). The check is the database's own record, independent of the worker's code.

The checks, per run (:class:`Report`):

* **lost**: a number that was enqueued and neither ran to its end nor was dead-lettered (must
  be 0);
* **duplicates**: extra end records (effects) beyond one per number; must be at most the
  **interrupted** executions: the jobs held by a worker or connection at the moment a fault hit
  it (counted when the fault is injected, so the bound is independent of the outcome);
* **tx duplicates / tx lost**: numbers of transactional jobs with more than one, or no,
  transactional effect (both must be 0: exactly once, where the plain ledger's duplicates are
  only bounded);
* **stale acks / stale writes accepted**: audit violations (must be 0);
* **recovery**: for each fault, from the fault until every job it interrupted was finished
  (for a fault that interrupted none: from the heal to the next finished job); the largest;
* **pickup latency**: from enqueue (``created_at``) to the first start;
* **durable jobs** (scenario 14, :mod:`tests.chaos.durable`): step functions run after their
  checkpoint committed (must be 0), re-runs (at most the interrupted), waits not woken by their
  committed event, sleeps cut short, steps missing (all 0).
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from pgqueue import PgQueue

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.chaos.chaos_app:pgq"
PGQ = shutil.which("pgq") or str(Path(sys.executable).parent / "pgq")

LEDGER_SQL = r"""
CREATE TABLE IF NOT EXISTS chaos_ledger (
    seq     bigserial PRIMARY KEY,
    job_id  bigint,
    n       bigint,
    token   integer,
    attempt integer,
    worker  text,
    pid     integer,
    event   text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

TX_LEDGER_SQL = r"""
CREATE TABLE IF NOT EXISTS chaos_tx_ledger (
    seq     bigserial PRIMARY KEY,
    job_id  bigint,
    n       bigint,
    token   integer,
    attempt integer,
    worker  text,
    pid     integer,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

AUDIT_SQL = r"""
CREATE TABLE IF NOT EXISTS chaos_done (
    job_id     bigint,
    n          bigint,
    token      integer,
    issuer     text,
    holder     text,
    created_at timestamptz,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS chaos_violations (
    job_id bigint,
    kind   text,
    issuer text,
    holder text,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION chaos_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    issuer  text := current_setting('application_name');
    holder  text := 'pgqueue worker ' || OLD.worker_id;
    -- now() is the writing statement's start: the reaper decides with the same clock.
    expired boolean := coalesce(OLD.lease_expires_at < now(), false);
    problem text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO chaos_done (job_id, n, token, issuer, holder, created_at)
        VALUES (OLD.id, (OLD.args ->> 'n')::bigint, OLD.lease_token, issuer, holder,
                OLD.created_at);
        IF OLD.state <> 'running' THEN
            problem := 'ack: job was not running';
        ELSIF issuer IS DISTINCT FROM holder AND NOT expired THEN
            problem := 'ack: by a worker that does not hold the lease';
        END IF;
    ELSIF NEW.lease_token <> OLD.lease_token THEN
        IF OLD.state = 'running' THEN
            problem := 'claim: job was running';
        END IF;
    ELSIF OLD.state = 'running' AND issuer IS DISTINCT FROM holder THEN
        IF NOT expired THEN
            problem := 'write: by a worker that does not hold the lease';
        ELSIF NEW.lease_expires_at > OLD.lease_expires_at THEN
            problem := 'heartbeat: expired lease extended by another worker';
        END IF;
    ELSIF OLD.state <> 'running' AND (NEW.state IS DISTINCT FROM OLD.state
                                      OR NEW.lease_expires_at IS NOT NULL) THEN
        problem := 'write: job was not running';
    END IF;
    IF problem IS NOT NULL THEN
        INSERT INTO chaos_violations (job_id, kind, issuer, holder)
        VALUES (OLD.id, problem, issuer, holder);
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS chaos_audit ON pgqueue.jobs;
CREATE TRIGGER chaos_audit AFTER UPDATE OR DELETE ON pgqueue.jobs
    FOR EACH ROW EXECUTE FUNCTION chaos_audit();
"""


def now() -> datetime:
    return datetime.now(UTC)


def query(dsn: str, statement: str, params: Any = None, *, retry_for: float = 60.0) -> list[Any]:
    """One statement on a fresh connection, retried while the database is unreachable (the
    harness keeps watching through restarts and cuts)."""
    deadline = time.monotonic() + retry_for
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                cur = conn.execute(statement, params)
                return cur.fetchall() if cur.description is not None else []
        except psycopg.errors.QueryCanceled:
            raise  # Ctrl-C: psycopg cancels the statement and raises this; stop, don't retry
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def scalar(dsn: str, statement: str, params: Any = None) -> Any:
    rows = query(dsn, statement, params)
    return rows[0][0] if rows else None


@dataclass
class Settings:
    jobs: int
    workers: int = 4
    concurrency: int = 8
    lease: float = 2.0
    job_ms: float = 2.0
    rate: float | None = None  # jobs/s enqueued while workers run; None: all up front
    enqueue_batch: int = 500
    poll_interval: float = 0.5
    reaper_interval: float = 0.5
    drain_timeout: float = 180.0
    worker_args: tuple[str, ...] = ()
    #: Every block_every-th job blocks its worker's event loop for block_ms (time.sleep in an
    #: async handler) before doing its work.
    block_every: int = 0
    block_ms: float = 0.0
    #: Every crash_every-th job kills the (child) process running it on its first attempt,
    #: alternately with os._exit and SIGKILL (the task must take ``crash``: chaos.sync_work).
    crash_every: int = 0
    #: Workers write their logs into a pipe nobody reads until they are stopped (a stuck log
    #: shipper, a supervisor's full pipe).
    unread_pipe: bool = False
    #: Every tx_every-th job also writes its effect in its completion's transaction (the
    #: transactional ledger); 0: none does.
    tx_every: int = 0
    #: More enqueue options for every job (the producer enqueues by task name: the task's own
    #: defaults do not apply).
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Env:
    """Where a scenario runs: a migrated database, a scratch directory, and for the restart
    scenarios a way to restart the server."""

    dsn: str
    workdir: Path
    restart: Callable[[], None] | None = None


def pick(size: str, ci: Any, full: Any) -> Any:
    return full if size == "full" else ci


@dataclass
class Fault:
    kind: str
    at: datetime
    held: list[int]  # job ids the fault interrupted
    healed_at: datetime | None = None


@dataclass
class Report:
    scenario: str
    enqueued: int = 0
    faults: int = 0
    executions: int = 0
    interrupted: int = 0
    duplicates: int = 0
    lost: int = 0
    #: Jobs the scenario loses by design, not the queue: enqueues committed on a primary whose
    #: asynchronous standby had not received them when it died (scenario 13b). Lost up to this
    #: many keeps the promise.
    lost_by_design: int = 0
    dead: int = 0
    stale_acks: int = 0
    stale_writes: int = 0
    #: The transactional ledger: jobs that write it, their numbers with more than one effect
    #: (extra effects counted) or none, and the plain ledger's duplicates among the same jobs.
    tx_jobs: int = 0
    tx_duplicates: int = 0
    tx_lost: int = 0
    tx_plain_duplicates: int = 0
    #: Durable jobs (scenario 14): jobs with steps; executions of their step functions (the
    #: ledger), those beyond one per step and job (re-runs: within the interrupted), those
    #: that started after the step's checkpoint had committed (must be 0), steps of a
    #: completed job without a checkpoint or an execution (0), waits that did not end with
    #: the committed emit's payload (0), and sleeps a job woke from before their time (0).
    durable_jobs: int = 0
    step_runs: int = 0
    step_reruns: int = 0
    steps_run_after_checkpoint: int = 0
    steps_missing: int = 0
    waits_not_woken: int = 0
    sleeps_cut_short: int = 0
    recovery_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    drain_s: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    def check(self, expect_dead: int = 0) -> None:
        """The promise: nothing lost (but what the scenario loses by design), duplicates bounded
        by interruptions, no stale write."""
        problems = []
        if self.lost > self.lost_by_design:
            by_design = f" (by design: {self.lost_by_design})" if self.lost_by_design else ""
            problems.append(f"{self.lost} jobs lost{by_design}")
        if self.duplicates > self.interrupted:
            problems.append(
                f"{self.duplicates} duplicate executions > {self.interrupted} interrupted"
            )
        if self.stale_acks or self.stale_writes:
            problems.append(f"stale writes accepted: {self.stale_acks} acks, {self.stale_writes}")
        if self.tx_duplicates or self.tx_lost:
            problems.append(
                f"transactional effects not exactly once: {self.tx_duplicates} duplicates, "
                f"{self.tx_lost} missing"
            )
        if self.durable_jobs:
            problems += self._durable_problems()
        if self.dead != expect_dead:
            problems.append(f"{self.dead} dead-lettered, expected {expect_dead}")
        assert not problems, f"{self.scenario}: {'; '.join(problems)} ({self})"

    def _durable_problems(self) -> list[str]:
        """Durable jobs: a completed step never runs again, re-runs only of interrupted ones."""
        problems = []
        if self.steps_run_after_checkpoint:
            problems.append(
                f"{self.steps_run_after_checkpoint} step functions ran after their step's "
                "checkpoint had committed"
            )
        if self.step_reruns > self.interrupted:
            problems.append(f"{self.step_reruns} step re-runs > {self.interrupted} interrupted")
        if self.steps_missing:
            problems.append(f"{self.steps_missing} steps of completed jobs never checkpointed")
        if self.waits_not_woken:
            problems.append(
                f"{self.waits_not_woken} waits did not end with their event's committed payload"
            )
        if self.sleeps_cut_short:
            problems.append(f"{self.sleeps_cut_short} jobs resumed before their sleep's end")
        return problems

    def row(self) -> dict[str, Any]:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"

        return {
            "scenario": self.scenario,
            "enqueued": self.enqueued,
            "faults": self.faults,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "interrupted": self.interrupted,
            "stale acks accepted": self.stale_acks + self.stale_writes,
            "recovery (s)": "-" if self.recovery_s is None else f"{self.recovery_s:.1f}",
            "p99 pickup (ms)": ms(self.p99_ms),
            "drain (s)": "-" if self.drain_s is None else f"{self.drain_s:.1f}",
        }

    def tx_row(self) -> dict[str, Any]:
        """The same executions in both ledgers (jobs that write the transactional one)."""
        return {
            "scenario": self.scenario,
            "faults": self.faults,
            "interrupted": self.interrupted,
            "transactional jobs": self.tx_jobs,
            "plain duplicates (all jobs)": self.duplicates,
            "plain duplicates (these jobs)": self.tx_plain_duplicates,
            "tx duplicates": self.tx_duplicates,
            "tx lost": self.tx_lost,
        }

    def durable_row(self) -> dict[str, Any]:
        """What the durable jobs' steps did (scenario 14)."""
        return {
            "scenario": self.scenario,
            "jobs": self.durable_jobs,
            "faults": self.faults,
            "interrupted": self.interrupted,
            "step executions": self.step_runs,
            "step re-runs": self.step_reruns,
            "run after checkpoint": self.steps_run_after_checkpoint,
            "tx step duplicates": self.tx_duplicates,
            "tx step lost": self.tx_lost,
            "waits not woken": self.waits_not_woken,
            "sleeps cut short": self.sleeps_cut_short,
        }


class Fleet:
    """Worker processes: spawn, signal, respawn; one log file per process."""

    def __init__(
        self,
        logs: Path,
        count: int,
        args: Sequence[str],
        dsn_for: Callable[[int], str],
        env_for: Callable[[int], dict[str, str]] | None = None,
        command: Sequence[str] = (PGQ,),
        unread_pipe: bool = False,
    ) -> None:
        self.logs = logs
        self.unread_pipe = unread_pipe
        self._readers: list[threading.Thread] = []
        self.args = list(args)
        self.dsn_for = dsn_for
        self.env_for = env_for or (lambda i: {})
        self.command = list(command)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * count
        self.spawned = 0
        self._pipe_logs: dict[int, Path] = {}
        self._reading: set[int] = set()

    def spawn(self, index: int) -> subprocess.Popen[bytes]:
        self.spawned += 1
        env = {k: v for k, v in os.environ.items() if k != "PGAPPNAME"}
        env.update(PGQUEUE_DSN=self.dsn_for(index), PYTHONUNBUFFERED="1", **self.env_for(index))
        log = self.logs / f"worker{index}-{self.spawned}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [*self.command, "work", APP, *self.args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE if self.unread_pipe else out,
                stderr=subprocess.STDOUT,
            )
        self.procs[index] = proc
        self._pipe_logs[proc.pid] = log
        return proc

    def _read_pipes(self) -> None:
        """Start reading the pipes nobody read so far (into each worker's log file)."""
        for proc in self.procs:
            if proc is None or proc.stdout is None or proc.pid in self._reading:
                continue
            self._reading.add(proc.pid)
            log = self._pipe_logs[proc.pid]

            def copy(source: Any = proc.stdout, target: Path = log) -> None:
                with source, open(target, "ab") as out:
                    for chunk in iter(lambda: source.read1(65536), b""):
                        out.write(chunk)

            reader = threading.Thread(target=copy, daemon=True)
            reader.start()
            self._readers.append(reader)

    def start(self) -> None:
        for index in range(len(self.procs)):
            self.spawn(index)

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is None]

    def exited(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p is not None and p.poll() is not None]

    def pid(self, index: int) -> int:
        proc = self.procs[index]
        assert proc is not None
        return proc.pid

    def signal(self, index: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid(index), signum)

    def stop(self, timeout: float = 60.0) -> None:
        self._read_pipes()
        for index in self.alive():
            self.signal(index, signal.SIGCONT)
            self.signal(index, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            if proc is None:
                continue
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


class Run:
    """One scenario run: set up, start workers and the producer, record faults, check."""

    def __init__(
        self,
        name: str,
        dsn: str,
        settings: Settings,
        workdir: Path,
        *,
        worker_dsn: Callable[[int], str] | None = None,
        worker_env: Callable[[int], dict[str, str]] | None = None,
        command: Sequence[str] = (PGQ,),
        task: str = "chaos.work",
        ledger_dsn: str | None = None,
    ) -> None:
        self.name = name
        self.dsn = dsn
        #: Where the effects ledger lives: the queue's database unless a scenario must keep
        #: it elsewhere (a failover rolls the queue's database back to what the standby had).
        self.ledger_dsn = ledger_dsn or dsn
        self.settings = settings
        self.workdir = workdir
        self.task = task
        self.faults: list[Fault] = []
        self.rng = random.Random(os.environ.get("CHAOS_SEED", "pgqueue"))
        workdir.mkdir(parents=True, exist_ok=True)
        s = settings
        # Transactional jobs hold a connection of the worker's for their completion's
        # transaction: a few per worker serve short jobs (stock max_connections is 100).
        tx_args = ["--transaction-connections", "4"] if s.tx_every else []
        args = [
            *tx_args,
            "--concurrency",
            str(s.concurrency),
            "--lease",
            f"{s.lease}s",
            "--poll-interval",
            f"{s.poll_interval}s",
            "--reaper-interval",
            f"{s.reaper_interval}s",
            "--shutdown-grace",
            "5s",
            *s.worker_args,
        ]
        ledger_env = {"CHAOS_LEDGER_DSN": self.ledger_dsn} if ledger_dsn else {}
        self.fleet = Fleet(
            workdir,
            s.workers,
            args,
            worker_dsn or (lambda i: dsn),
            (lambda i: {**ledger_env, **worker_env(i)}) if worker_env else (lambda i: ledger_env),
            command,
            unread_pipe=s.unread_pipe,
        )
        self.enqueued = 0
        self.started_at = now()
        self.drained_at: datetime | None = None
        self._producer: threading.Thread | None = None
        self._producer_error: BaseException | None = None
        self.deadlocks_before = 0
        #: Statements the producer saw fail (each retried until its batch was in).
        self.producer_errors = 0
        query(self.ledger_dsn, LEDGER_SQL)
        query(dsn, TX_LEDGER_SQL)  # in the queue's database: written with the completions
        query(dsn, AUDIT_SQL)
        self.deadlocks_before = self.deadlocks()

    def start_workers(self, timeout: float = 60.0) -> None:
        """Start the fleet and wait until every worker has registered (so pickup latency
        measures the queue, not interpreter start-up) and has said it started: it writes its
        task declarations in between, whose COMMIT a fault armed too early caught instead of
        the one it was meant for (scenario 5b on a loaded machine)."""
        self.fleet.start()
        self.wait(
            lambda: (
                scalar(self.dsn, "SELECT count(*) FROM pgqueue.workers WHERE stopped_at IS NULL")
                >= self.settings.workers
                and (
                    self.fleet.unread_pipe  # (its logs are read at the end)
                    or self.fleet.log_text().count("worker started") >= self.settings.workers
                )
            ),
            timeout,
            "the workers to start",
        )
        self.started_at = now()

    # -- jobs ------------------------------------------------------------------------------

    def start_producer(self) -> None:
        self._producer = threading.Thread(target=self._produce, daemon=True, name="producer")
        self._producer.start()

    def _produce(self) -> None:
        s = self.settings
        pgq = PgQueue(self.dsn)
        try:
            batch = s.enqueue_batch
            if s.rate is not None:  # paced: small batches at the rate's rhythm
                batch = max(1, min(batch, int(s.rate / 20)))
            started = time.monotonic()
            for first in range(0, s.jobs, batch):
                numbers = range(first, min(s.jobs, first + batch))
                self._enqueue_batch(pgq, numbers)
                self.enqueued = numbers[-1] + 1
                if s.rate is not None:
                    delay = started + self.enqueued / s.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
        except BaseException as exc:
            self._producer_error = exc
            raise
        finally:
            pgq.close()

    def _enqueue_batch(self, pgq: PgQueue, numbers: range) -> None:
        # Faults must not use up a job's attempts: only the poison pill may die of them.
        s = self.settings
        options = {"max_attempts": 1000, **s.options}
        specs = [
            pgq.spec(self.task, {"n": n, "ms": s.job_ms, **self._blocks(n)}, options)
            for n in numbers
        ]
        deadline = time.monotonic() + 120
        while True:
            try:
                pgq.enqueue_many(specs)
                return
            except psycopg.OperationalError:
                self.producer_errors += 1
                # The commit may or may not have happened (the reply was lost): the batch is
                # one transaction, so one of its jobs existing anywhere proves it did.
                if self._batch_exists(numbers[0]):
                    return
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def _blocks(self, n: int) -> dict[str, Any]:
        """The fault a numbered job carries in its args, if any (and whether it writes the
        transactional ledger)."""
        s = self.settings
        extra: dict[str, Any] = {"tx": True} if self.transactional(n) else {}
        if s.block_every and n % s.block_every == 0:
            return {**extra, "block_ms": s.block_ms}
        if s.crash_every and n % s.crash_every == 0:
            return {**extra, "crash": "kill" if n // s.crash_every % 2 else "exit"}
        return extra

    def transactional(self, n: int) -> bool:
        every = self.settings.tx_every
        return bool(every) and n % every == 0

    def _batch_exists(self, n: int) -> bool:
        return bool(
            scalar(
                self.dsn,
                "SELECT EXISTS (SELECT 1 FROM chaos_done WHERE n = %(n)s)"
                " OR EXISTS (SELECT 1 FROM pgqueue.jobs WHERE (args ->> 'n')::bigint = %(n)s)"
                " OR EXISTS (SELECT 1 FROM pgqueue.dead_letters"
                "            WHERE (args ->> 'n')::bigint = %(n)s)",
                {"n": n},
            )
        )

    def enqueue_extra(self, task: str, n: int, **options: Any) -> int:
        """One more job outside the numbered stream (a poison pill, a probe)."""
        with PgQueue(self.dsn) as pgq:
            return int(pgq.enqueue(task, {"n": n}, **options))

    def producer_done(self) -> bool:
        if self._producer_error is not None:
            raise self._producer_error
        return self._producer is None or not self._producer.is_alive()

    # -- watching --------------------------------------------------------------------------

    def started_twice(self) -> int:
        """Numbered jobs whose handler started more than once. A stale copy stopped when its
        heartbeat finds the lease lost often writes no end record, which is what
        ``Report.duplicates`` counts: where nothing is interrupted, no job may even start
        twice."""
        return int(
            scalar(
                self.ledger_dsn,
                "SELECT count(*) FROM (SELECT n FROM chaos_ledger WHERE event = 'start'"
                " GROUP BY n HAVING count(*) > 1) AS twice",
            )
        )

    def progress(self) -> int:
        """Ledger records written so far (two per execution): a cheap progress counter."""
        return int(scalar(self.ledger_dsn, "SELECT coalesce(max(seq), 0) FROM chaos_ledger"))

    def remaining(self) -> int:
        return int(scalar(self.dsn, "SELECT count(*) FROM pgqueue.jobs"))

    def finished(self) -> bool:
        return self.producer_done() and self.remaining() == 0

    def worker_ids(self, index: int) -> list[str]:
        """The pgqueue worker id(s) of fleet process ``index`` (it registers at start)."""
        rows = query(
            self.dsn,
            "SELECT id::text FROM pgqueue.workers WHERE pid = %s AND stopped_at IS NULL",
            (self.fleet.pid(index),),
        )
        return [row[0] for row in rows]

    def held(self, worker_ids: Sequence[str] | None = None) -> list[int]:
        """Ids of running jobs (of these workers, or of everyone)."""
        rows = query(
            self.dsn,
            "SELECT id FROM pgqueue.jobs WHERE state = 'running'"
            " AND (%(w)s::uuid[] IS NULL OR worker_id = ANY(%(w)s::uuid[]))",
            {"w": list(worker_ids) if worker_ids is not None else None},
        )
        return [row[0] for row in rows]

    def lost_claims(self, fault: Fault, until: datetime) -> list[int]:
        """Jobs started twice under one lease token, the first time just before ``fault`` (from
        a second before it was injected until ``until``, its heal): the database lost that
        claim (a crash or failover before its COMMIT was durable; an idle worker starts a job
        while its claim's COMMIT is on its way) and handed the token out again. The fault
        interrupted them, whether or not they were running when the held jobs were sampled.
        A job run twice under one token at any other time is not excused."""
        rows = query(
            self.ledger_dsn,
            "SELECT DISTINCT job_id FROM chaos_ledger WHERE event = 'start'"
            " GROUP BY job_id, token"
            " HAVING count(*) > 1 AND min(at) BETWEEN %s AND %s",
            (fault.at - timedelta(seconds=1), until),
        )
        return [row[0] for row in rows]

    def claims_cut(self, fault: Fault, worker_ids: Sequence[str]) -> list[int]:
        """Jobs one of ``worker_ids`` started from a second before ``fault`` until its heal and
        that started again later: the fault cut them off, whether or not their claim had
        committed when the held jobs were sampled (an idle worker starts its jobs while its
        claim's COMMIT is on its way, and a blackhole can hold that COMMIT past the sample:
        the jobs were nobody's 'running' rows then, and the claim commits or is lost after)."""
        rows = query(
            self.ledger_dsn,
            "SELECT DISTINCT a.job_id FROM chaos_ledger AS a"
            "  JOIN chaos_ledger AS b ON b.job_id = a.job_id AND b.event = 'start' AND b.at > a.at"
            " WHERE a.event = 'start' AND a.worker = ANY(%s) AND a.at BETWEEN %s AND %s",
            (list(worker_ids), fault.at - timedelta(seconds=1), fault.healed_at or fault.at),
        )
        return [row[0] for row in rows]

    def fault(
        self,
        kind: str,
        held: list[int],
        healed_at: datetime | None = None,
        at: datetime | None = None,
    ) -> Fault:
        """A fault injected ``at`` (default: now), the jobs it interrupted ``held``."""
        record = Fault(kind, now() if at is None else at, held, healed_at)
        self.faults.append(record)
        return record

    def deadlocks(self) -> int:
        return int(
            scalar(
                self.dsn,
                "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()",
            )
        )

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: timed out after {timeout}s waiting for {what}")
            time.sleep(0.1)

    def drain(self) -> None:
        """After the faults: wait for the producer and for the queue to empty."""
        self.wait(self.finished, self.settings.drain_timeout, "the queue to drain")
        self.drained_at = now()

    # -- the check -------------------------------------------------------------------------

    def report(self) -> Report:
        """Stop the workers and compute the figures."""
        self.fleet.stop()
        dsn = self.dsn
        report = Report(self.name, enqueued=self.enqueued, faults=len(self.faults))
        ends = query(
            self.ledger_dsn,
            "SELECT n, count(*) FROM chaos_ledger WHERE event = 'end' AND n < %s GROUP BY n",
            (self.settings.jobs,),
        )
        ended = {n for n, _ in ends}
        report.duplicates = sum(count - 1 for _, count in ends)
        report.executions = int(
            scalar(self.ledger_dsn, "SELECT count(*) FROM chaos_ledger WHERE event = 'start'")
        )
        dead = query(dsn, "SELECT (args ->> 'n')::bigint FROM pgqueue.dead_letters")
        report.dead = len(dead)
        buried = {row[0] for row in dead}
        report.lost = sum(1 for n in range(self.enqueued) if n not in ended and n not in buried)
        report.notes["still queued"] = self.remaining()
        report.interrupted = sum(len(f.held) for f in self.faults)
        self._tx_figures(report, buried, {n: count for n, count in ends})
        violations = query(dsn, "SELECT kind, count(*) FROM chaos_violations GROUP BY kind")
        report.stale_acks = sum(c for kind, c in violations if kind.startswith("ack"))
        report.stale_writes = sum(c for kind, c in violations if not kind.startswith("ack"))
        if violations:
            report.notes["violations"] = dict(violations)
        p50, p99 = self._pickup_percentiles()
        report.p50_ms, report.p99_ms = p50, p99
        report.recovery_s = self._recovery()
        if self.drained_at is not None:
            report.drain_s = (self.drained_at - self.started_at).total_seconds()
        report.notes["deadlocks"] = self.deadlocks() - self.deadlocks_before
        report.notes["worker processes"] = self.fleet.spawned
        return report

    def _tx_figures(self, report: Report, buried: set[int], plain: dict[int, int]) -> None:
        """The transactional ledger against the numbers that write it: exactly one effect each
        (none for a dead-lettered one)."""
        numbers = [n for n in range(self.enqueued) if self.transactional(n)]
        if not numbers:
            return
        counts = dict(
            query(
                self.dsn,
                "SELECT n, count(*) FROM chaos_tx_ledger WHERE n < %s GROUP BY n",
                (self.settings.jobs,),
            )
        )
        report.tx_jobs = len(numbers)
        report.tx_duplicates = sum(max(0, counts.get(n, 0) - 1) for n in numbers)
        report.tx_lost = sum(1 for n in numbers if n not in counts and n not in buried)
        report.tx_plain_duplicates = sum(max(0, plain.get(n, 0) - 1) for n in numbers)

    def _pickup_percentiles(self) -> tuple[float | None, float | None]:
        """Enqueue (the queue's record) to first start (the ledger's), p50 and p99 in ms."""
        if self.ledger_dsn == self.dsn:
            p50, p99 = query(
                self.dsn,
                "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),"
                "       percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)"
                "  FROM (SELECT extract(epoch FROM min(l.at) - d.created_at) * 1000 AS ms"
                "          FROM chaos_done AS d JOIN chaos_ledger AS l ON l.job_id = d.job_id"
                "         WHERE l.event = 'start' AND d.n < %s"
                "         GROUP BY d.job_id, d.created_at) s",
                (self.settings.jobs,),
            )[0]
            return p50, p99
        # Two databases: join here (both clocks are the same machine's).
        starts = dict(
            query(
                self.ledger_dsn,
                "SELECT job_id, min(at) FROM chaos_ledger WHERE event = 'start' GROUP BY job_id",
            )
        )
        done = query(
            self.dsn,
            "SELECT job_id, created_at FROM chaos_done WHERE n < %s",
            (self.settings.jobs,),
        )
        ms = sorted(
            (starts[job_id] - created).total_seconds() * 1000
            for job_id, created in done
            if job_id in starts
        )
        return _percentile(ms, 0.5), _percentile(ms, 0.99)

    def _recovery(self) -> float | None:
        """Per fault: from the fault until every job it interrupted was done again (or, if it
        interrupted none, from the heal until the next job was done). The worst is reported."""
        worst: float | None = None
        for f in self.faults:
            start = f.at if f.held else (f.healed_at or f.at)
            if f.held:
                done = scalar(
                    self.dsn, "SELECT max(at) FROM chaos_done WHERE job_id = ANY(%s)", (f.held,)
                )
            else:
                done = scalar(self.dsn, "SELECT min(at) FROM chaos_done WHERE at > %s", (start,))
            if done is None:
                continue
            seconds = max(0.0, (done - start).total_seconds())
            worst = seconds if worst is None else max(worst, seconds)
        return worst

    def close(self) -> None:
        self.fleet.stop(timeout=10)


def kill_and_respawn(chaos: Run, index: int) -> None:
    """SIGKILL fleet process ``index`` (the jobs it holds interrupted) and start it again."""
    # Stop it first so the jobs it holds can be counted exactly, then kill it.
    chaos.fleet.signal(index, signal.SIGSTOP)
    held = chaos.held(chaos.worker_ids(index))
    chaos.fleet.signal(index, signal.SIGKILL)
    proc = chaos.fleet.procs[index]
    assert proc is not None
    proc.wait()
    chaos.fault("SIGKILL", held)
    chaos.fleet.spawn(index)


def crash_server(chaos: Run, env: Env) -> Fault:
    """``env.restart`` (``pg_ctl restart -m immediate``: a crash), the jobs it interrupted
    counted: those running just before it, and those still running when the server is back. A
    crash keeps every committed claim and ack and nothing else, so the rows still running then
    are exactly the jobs held at the crash itself (read before the workers reconnect); jobs
    claimed between the first sample and the crash count too. After the drain,
    :func:`count_lost_claims` adds the claims the crash lost."""
    assert env.restart is not None, "this scenario needs a server it may restart"
    held = chaos.held()
    fault = chaos.fault("restart", held)
    env.restart()
    fault.healed_at = now()
    fault.held = sorted({*held, *chaos.held()})
    return fault


def count_lost_claims(chaos: Run) -> None:
    """Once drained: each crash also interrupted the claims it lost after they started their
    jobs (see :meth:`Run.lost_claims`)."""
    for fault in chaos.faults:
        if fault.kind == "restart":
            lost = chaos.lost_claims(fault, fault.healed_at or fault.at)
            fault.held = sorted({*fault.held, *lost})


def count_claims_cut(chaos: Run, worker_ids: Sequence[str]) -> None:
    """Once drained: each network fault also interrupted the claims of ``worker_ids`` it cut
    off in flight (see :meth:`Run.claims_cut`)."""
    for fault in chaos.faults:
        fault.held = sorted({*fault.held, *chaos.claims_cut(fault, worker_ids)})


def _percentile(ordered: Sequence[float], q: float) -> float | None:
    """As percentile_cont: linear between the two nearest ranks."""
    if not ordered:
        return None
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@contextlib.contextmanager
def run(name: str, dsn: str, settings: Settings, workdir: Path, **kwargs: Any) -> Iterator[Run]:
    chaos = Run(name, dsn, settings, workdir, **kwargs)
    try:
        yield chaos
    finally:
        chaos.close()


def format_table(reports: Sequence[Report], tx: bool = False, durable: bool = False) -> str:
    """The figures as a Markdown table (``tx``: the transactional ledger's, for the runs that
    wrote it; ``durable``: the durable jobs' steps, for the runs that had any)."""
    if durable:
        rows = [r.durable_row() for r in reports if r.durable_jobs]
    elif tx:
        rows = [r.tx_row() for r in reports if r.tx_jobs]
    else:
        rows = [r.row() for r in reports]
    if not rows:
        return ""
    headers = list(rows[0])
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
    ]
    lines += ["| " + " | ".join(str(row[h]) for h in headers) + " |" for row in rows]
    return "\n".join(lines)

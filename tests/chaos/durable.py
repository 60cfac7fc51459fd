"""Scenario 14: durable jobs (steps, a transactional step, a durable sleep, a wait for an event)
while workers are SIGKILLed and PostgreSQL crashes (``pg_ctl restart -m immediate``).

Each job (``chaos.durable`` in :mod:`tests.chaos.chaos_app`) writes a start record, runs step A
(plain: its function writes a ledger row ``step:A``, then the step is checkpointed), step B
(transactional: its function writes ``step:B`` to the ledger on a connection of its own, then
its effect, a ``chaos_tx_ledger`` row, on the step's connection: effect and checkpoint commit
together), sleeps (durably, up to a second, spread by n), waits for the event ``chaos-<n>``,
runs step C and writes its end record. Every job thus leaves its worker twice (the sleep, the
wait) and runs at least three times.

An emitter thread emits every job's event once, with the payload ``{"n": n, "emit":
"committed"}``: every third job's right after its enqueue (before the job waits: the wait finds
it kept), the others' once their wait is seen parked (the emit wakes the job). Every fourth job's
event is first emitted with the payload ``"rolled back"`` in a transaction held open a moment
and rolled back, then emitted for real: the rolled-back emit must wake nobody.

What is checked, beyond the harness's figures (lost 0, stale writes 0, transactional effects
exactly once: step B's):

* **a completed step never runs again**: an execution of a step's function that started after
  the step's checkpoint had committed is a violation (0). The checkpoint's commit is bounded
  from below by the database's own record: for a plain step, ``job_steps.finished_at``, the
  ``now()`` of its one-statement write (which starts after the function's ledger row committed,
  and commits after it starts); for the transactional step, the effect row's
  ``clock_timestamp()``, inside the transaction that committed it with the checkpoint. An
  execution is dated by its ledger row (committed before the function goes on; the row of a
  handler stopped before it went out is dropped: see ``_LedgerWriter`` in chaos_app);
* **re-runs are bounded**: executions beyond one per step and job happen only when a run was
  interrupted before its checkpoint committed; there are at most as many as interrupted jobs;
* every completed job has its three checkpoints and an execution of each;
* every wait ended with the committed emit's payload (never the rolled-back one, never a
  timeout), and no job resumed from its sleep before its wake time;
* checkpoints are written only by the worker holding the job: an audit trigger on
  ``pgqueue.job_steps`` records any other write in ``chaos_violations`` (a stale write).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from datetime import datetime
from typing import Any

import psycopg

from pgqueue import PgQueue
from tests.chaos.chaos_app import event_name
from tests.chaos.harness import (
    Env,
    Report,
    Run,
    Settings,
    count_lost_claims,
    crash_server,
    kill_and_respawn,
    pick,
    query,
    run,
)

NAME = "14. durable jobs: SIGKILL + restart -m immediate"
STEPS = ("A", "B", "C")
#: Every EARLY_EVERY-th job's event is emitted right after its enqueue, before it waits.
EARLY_EVERY = 3
#: Every ROLLBACK_EVERY-th job's event is first emitted in a transaction that rolls back.
ROLLBACK_EVERY = 4

STEP_AUDIT_SQL = r"""
CREATE OR REPLACE FUNCTION chaos_step_audit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    issuer     text := current_setting('application_name');
    job_state  text;
    job_worker uuid;
    problem    text;
BEGIN
    IF NEW.kind <> 'step' THEN
        RETURN NULL;  -- sleeps and waits: parked by the holder, completed by an emit
    END IF;
    -- A new snapshot: the job's row as the checkpoint's lock found it.
    SELECT state, worker_id INTO job_state, job_worker FROM pgqueue.jobs WHERE id = NEW.job_id;
    IF NOT FOUND THEN
        problem := 'checkpoint: job not in the queue';
    ELSIF job_state <> 'running' THEN
        problem := 'checkpoint: job was not running';
    ELSIF issuer IS DISTINCT FROM 'pgqueue worker ' || job_worker THEN
        problem := 'checkpoint: by a worker that does not hold the job';
    END IF;
    IF problem IS NOT NULL THEN
        INSERT INTO chaos_violations (job_id, kind, issuer, holder)
        VALUES (NEW.job_id, problem, issuer, 'pgqueue worker ' || job_worker);
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS chaos_step_audit ON pgqueue.job_steps;
CREATE TRIGGER chaos_step_audit AFTER INSERT OR UPDATE ON pgqueue.job_steps
    FOR EACH ROW EXECUTE FUNCTION chaos_step_audit();
"""


def durable_jobs(env: Env, size: str) -> Report:
    """Durable jobs (see the module docstring) while random workers are SIGKILLed (and
    respawned) and PostgreSQL crashes, one fault every ``gap`` seconds, every third one a
    crash."""
    assert env.restart is not None, "this scenario needs a server it may restart"
    settings = Settings(
        jobs=pick(size, 400, 5000),
        workers=pick(size, 3, 4),
        concurrency=8,
        lease=3.0,
        job_ms=1000.0,  # the longest durable sleep
        rate=pick(size, 60.0, 60.0),
        tx_every=1,  # every job has the transactional step B
        # Kept in the history when done, and so are its steps, which the check reads.
        options={"result_ttl": 86400},
    )
    faults = pick(size, 6, 30)
    gap = pick(size, 1.2, 2.5)
    with run(NAME, env.dsn, settings, env.workdir, task="chaos.durable") as chaos:
        query(env.dsn, STEP_AUDIT_SQL)
        chaos.start_workers()
        emitter = Emitter(chaos)
        emitter.start()
        try:
            chaos.start_producer()
            for i in range(faults):
                time.sleep(gap)
                if chaos.finished():
                    break
                if i % 3 == 2:
                    crash_server(chaos, env)
                else:
                    _kill(chaos, chaos.rng.choice(chaos.fleet.alive()))
            chaos.drain()
        finally:
            emitter.stop()  # (and raises what stopped it, if anything did)
        count_lost_claims(chaos)
        report = chaos.report()
        durable_figures(chaos, report)
    kinds = Counter(f.kind for f in chaos.faults)
    report.notes.update(
        restarts=kinds["restart"],
        SIGKILLs=kinds["SIGKILL"],
        **{
            "emits rolled back": emitter.rolled_back,
            "emitter errors (retried)": emitter.errors,
            # Who took part in a deadlock pg_stat_database counted, if anyone said so.
            "emits aborted by a deadlock": emitter.deadlocks,
            "deadlock errors in worker logs": chaos.fleet.log_text().count("deadlock detected"),
        },
    )
    return report


def _kill(chaos: Run, index: int) -> None:
    """SIGKILL a worker; its jobs still running a moment later count as interrupted too (a
    claim it had sent commits after the first count)."""
    ids = chaos.worker_ids(index)
    kill_and_respawn(chaos, index)
    time.sleep(0.2)
    fault = chaos.faults[-1]
    fault.held = sorted({*fault.held, *chaos.held(ids)})


class Emitter:
    """Emits each job's event once (see the module docstring), through restarts: a statement
    that fails is tried again on a new connection (an emit whose COMMIT reply was lost is tried
    again too, and changes nothing: the first emit of a name wins)."""

    def __init__(self, chaos: Run) -> None:
        self.chaos = chaos
        self.pgq = PgQueue(chaos.dsn)
        self.emitted: set[int] = set()
        self.rolled_back = 0
        self.errors = 0
        #: Emits PostgreSQL aborted to break a deadlock (tried again; among the errors).
        self.deadlocks = 0
        self._next_early = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="emitter")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        with contextlib.suppress(psycopg.Error):
            if self._conn is not None:
                self._conn.close()
        self.pgq.close()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                due = self._retrying(self._due)
                for n in due:
                    self._retrying(lambda n=n: self._emit(n))
                if not due:
                    time.sleep(0.05)
        except BaseException as exc:
            self._error = exc

    def _due(self) -> list[int]:
        """Early events of the jobs enqueued since the last look, and the events parked waits
        wait for (not emitted yet)."""
        enqueued = self.chaos.enqueued
        due = [n for n in range(self._next_early, enqueued) if n % EARLY_EVERY == 0]
        waited = self._connection().execute(
            "SELECT event FROM pgqueue.job_steps WHERE state = 'waiting' AND event IS NOT NULL"
        )
        due += sorted(int(event.removeprefix("chaos-")) for (event,) in waited)
        self._next_early = enqueued  # (only once the look went through: else it is tried again)
        return [n for n in dict.fromkeys(due) if n not in self.emitted]

    def _emit(self, n: int) -> None:
        conn = self._connection()
        if n % ROLLBACK_EVERY == 1:
            with conn.transaction(force_rollback=True):
                self.pgq.emit_event(event_name(n), {"n": n, "emit": "rolled back"}, conn=conn)
                time.sleep(self.chaos.rng.uniform(0.0, 0.02))  # a wait may try to park now
            self.rolled_back += 1
        with conn.transaction():
            self.pgq.emit_event(event_name(n), {"n": n, "emit": "committed"}, conn=conn)
        self.emitted.add(n)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.chaos.dsn, autocommit=True, connect_timeout=5)
        return self._conn

    def _retrying(self, action: Any) -> Any:
        deadline = time.monotonic() + 120
        while True:
            try:
                return action()
            except psycopg.OperationalError as exc:
                self.errors += 1
                self.deadlocks += isinstance(exc, psycopg.errors.DeadlockDetected)
                if self._conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        self._conn.close()
                self._conn = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def durable_figures(chaos: Run, report: Report) -> None:
    """The durable checks (see the module docstring), from the ledgers and the job's steps."""
    dsn, jobs = chaos.dsn, chaos.settings.jobs
    numbers: dict[int, int] = dict(
        query(dsn, "SELECT job_id, n FROM chaos_done WHERE n < %s", (jobs,))
    )
    executions: dict[tuple[int, str], list[datetime]] = {}
    for job_id, event, at in query(
        chaos.ledger_dsn,
        "SELECT job_id, event, at FROM chaos_ledger WHERE event LIKE 'step:%%' ORDER BY seq",
    ):
        if job_id in numbers:
            executions.setdefault((job_id, event.removeprefix("step:")), []).append(at)
    # When each step's checkpoint had surely not committed yet (see the module docstring).
    committed: dict[tuple[int, str], datetime] = {
        (job_id, name): finished
        for job_id, name, finished in query(
            dsn,
            "SELECT job_id, name, finished_at FROM pgqueue.job_steps"
            " WHERE kind = 'step' AND state = 'succeeded' AND name IN ('A', 'C')",
        )
    }
    effects = query(dsn, "SELECT job_id, min(at) FROM chaos_tx_ledger GROUP BY job_id")
    committed.update(((job_id, "B"), at) for job_id, at in effects)
    waits = {
        job_id: (state, result, started)
        for job_id, state, result, started in query(
            dsn,
            "SELECT job_id, state, result, started_at FROM pgqueue.job_steps WHERE kind = 'wait'",
        )
    }
    wakes = dict(query(dsn, "SELECT job_id, wake_at FROM pgqueue.job_steps WHERE kind = 'sleep'"))
    emitted = dict(query(dsn, "SELECT name, emitted_at FROM pgqueue.events"))

    report.durable_jobs = len(numbers)
    report.step_runs = sum(len(ats) for ats in executions.values())
    report.step_reruns = sum(len(ats) - 1 for ats in executions.values())
    before = after = 0
    violations: list[str] = []
    for job_id, n in numbers.items():
        for step in STEPS:
            ran = executions.get((job_id, step), [])
            bound = committed.get((job_id, step))
            if not ran or bound is None:
                report.steps_missing += 1
                continue
            late = [at for at in ran if at > bound]
            if late:
                report.steps_run_after_checkpoint += len(late)
                violations.append(
                    f"job {job_id} step {step}: +{(late[0] - bound).total_seconds():.3f}s"
                )
        state, result, started = waits.get(job_id, (None, None, None))
        if state != "succeeded" or result != {"n": n, "emit": "committed"}:
            report.waits_not_woken += 1
        elif emitted[event_name(n)] < started:
            before += 1
        else:
            after += 1
        wake, ran_c = wakes.get(job_id), executions.get((job_id, "C"))
        if wake is None:
            report.steps_missing += 1  # a completed job whose sleep was never parked
        elif ran_c and min(ran_c) < wake:
            report.sleeps_cut_short += 1
    report.notes.update(
        {
            "events emitted before the wait": before,
            "events emitted while it waited": after,
            "runs per job": round(report.executions / max(1, len(numbers)), 2),
        }
    )
    if violations:  # which ones, and how long after the checkpoint (the first few)
        report.notes["steps run after their checkpoint"] = violations[:10]

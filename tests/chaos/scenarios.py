"""The fault-injection scenarios, each at two sizes: ``ci`` (a few seconds each, run by
``pytest -m chaos``) and ``full`` (``python -m benchmarks.chaos``).

Every scenario returns a :class:`~tests.chaos.harness.Report`; the caller checks it. Scenario 14
(durable jobs) lives in :mod:`tests.chaos.durable`, scenario 15 (a held snapshot) in
:mod:`tests.chaos.horizon`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg

from pgqueue.db.queries import query as named
from tests.chaos.durable import durable_jobs
from tests.chaos.harness import (
    Env,
    Report,
    Run,
    Settings,
    count_claims_cut,
    count_lost_claims,
    crash_server,
    kill_and_respawn,
    now,
    pick,
    query,
    run,
    scalar,
)
from tests.chaos.horizon import held_snapshot
from tests.chaos.proxy import TRANSACTION_COMMIT, Proxy

# -- 1. SIGKILL ------------------------------------------------------------------------------


def sigkill_workers(env: Env, size: str) -> Report:
    """Workers SIGKILLed at random (5 % per completed batch) and respawned."""
    settings = Settings(
        jobs=pick(size, 3000, 100_000),
        workers=pick(size, 4, 8),
        concurrency=pick(size, 8, 32),  # a batch is up to this many jobs
        lease=2.0,
        job_ms=2.0,
        # Paced below what the fleet drains on a busy 2-core machine, so pickup latency shows
        # the faults rather than a backlog the producer built up.
        rate=pick(size, 500.0, 700.0),
        tx_every=2,  # half the jobs also write their effect in their completion's transaction
    )
    with run("1. SIGKILL workers (5%/batch)", env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        batch = 2 * settings.concurrency  # ledger rows (start + end) of one completed batch
        seen = chaos.progress()
        while not chaos.finished():
            time.sleep(0.05)
            progress = chaos.progress()
            batches, seen = (progress - seen) // batch, seen + (progress - seen) // batch * batch
            for _ in range(batches):
                if chaos.rng.random() < 0.05 and chaos.fleet.alive():
                    kill_and_respawn(chaos, chaos.rng.choice(chaos.fleet.alive()))
        chaos.drain()
        return chaos.report()


# -- 2. SIGSTOP past the lease --------------------------------------------------------------


def sigstop_past_lease(env: Env, size: str) -> Report:
    """A worker frozen (SIGSTOP) for three leases while holding jobs, then thawed: its late
    heartbeats and acks must change nothing; the others have taken its jobs over."""
    settings = Settings(
        jobs=pick(size, 240, 1500),
        workers=3,
        concurrency=4,
        lease=1.0,
        job_ms=300.0,
        rate=pick(size, None, 30.0),  # full size: paced at ~3/4 of the 40 jobs/s capacity
        tx_every=2,
    )
    rounds = pick(size, 2, 10)
    with run("2. SIGSTOP > lease, SIGCONT", env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        for _ in range(rounds):
            if chaos.finished():
                break
            index, held = _busy_worker(chaos)
            if index is None:
                continue
            chaos.fleet.signal(index, signal.SIGSTOP)
            held = chaos.held(chaos.worker_ids(index))
            fault = chaos.fault("SIGSTOP", held)
            time.sleep(settings.lease * 3)
            chaos.fleet.signal(index, signal.SIGCONT)
            fault.healed_at = now()
            time.sleep(settings.lease)
        chaos.drain()
        report = chaos.report()
    text = chaos.fleet.log_text()
    report.notes["late writes rejected"] = len(re.findall(r"lease lost|stale \w+ ignored", text))
    return report


def _busy_worker(chaos: Run) -> tuple[int | None, list[int]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not chaos.finished():
        for index in chaos.fleet.alive():
            held = chaos.held(chaos.worker_ids(index))
            if held:
                return index, held
        time.sleep(0.05)
    return None, []


# -- 3. reaper vs late ack --------------------------------------------------------------------


def reaper_vs_late_ack(env: Env, size: str) -> Report:
    """The reaper and a late ack on one expired lease, forced into both orders with two
    connections (the second blocked on the first's row lock before the first commits), then
    raced freely. Never both may win."""
    rounds = pick(size, 20, 500)
    report = Report("3. reaper vs late ack (both orders)")
    both = wins_reaper = wins_ack = 0
    with (
        psycopg.connect(env.dsn, autocommit=True) as c1,
        psycopg.connect(env.dsn, autocommit=True) as c2,
    ):
        for round_ in range(rounds):
            for order in ("reaper first", "ack first", "race"):
                job, token = _expired_claim(c1, round_)
                reaped, acked = _reap_and_ack(c1, c2, job, token, order)
                both += reaped and acked
                wins_reaper += reaped
                wins_ack += acked
                assert reaped or acked, f"{order}: neither won"
                report.faults += 1
                report.enqueued += 1
    report.stale_acks = both
    report.notes.update(reaper_won=wins_reaper, ack_won=wins_ack, both_won=both)
    return report


def _expired_claim(conn: psycopg.Connection[Any], n: int) -> tuple[int, int]:
    """A job claimed by an absent worker whose lease has just expired."""
    conn.execute("DELETE FROM pgqueue.jobs")
    conn.execute("SELECT pgqueue.enqueue('chaos.work', %s)", (f'{{"n": {n}}}',))
    row = conn.execute(
        named("claim_jobs"),
        {
            "queues": ["default"],
            "tasks": ["chaos.work"],
            "lease": timedelta(milliseconds=1),
            "worker_id": "00000000-0000-0000-0000-000000000001",
            "limit": 1,
            # from the top of the queue
            "after_priority": [None],
            "after_run_at": [None],
            "after_id": [None],
        },
    ).fetchone()
    assert row is not None
    time.sleep(0.005)
    return int(row[0]), int(row[6])


def _reap_and_ack(
    c1: psycopg.Connection[Any], c2: psycopg.Connection[Any], job: int, token: int, order: str
) -> tuple[bool, bool]:
    ack = {"ids": [job], "tokens": [token], "results": [None]}
    result: dict[str, bool] = {}

    def acker() -> None:
        result["acked"] = bool(c2.execute(named("ack_jobs"), ack).fetchall())

    if order == "reaper first":
        with c1.transaction():
            reaped = _reap(c1)
            thread = threading.Thread(target=acker)
            thread.start()
            _wait_blocked(c1, c2)  # the ack waits on the reaper's row lock...
        thread.join(10)  # ...and re-checks its WHERE after the reaper commits
        return reaped, result["acked"]
    if order == "ack first":
        with c2.transaction():
            acked = bool(c2.execute(named("ack_jobs"), ack).fetchall())
            # The reaper runs while the ack holds the row: SKIP LOCKED, it must not take it.
            reaped = _reap(c1)
        reaped = reaped or _reap(c1)
        return reaped, acked
    barrier = threading.Barrier(2)
    outcome: dict[str, bool] = {}

    def reaper() -> None:
        barrier.wait()
        outcome["reaped"] = _reap(c1)

    def late_ack() -> None:
        barrier.wait()
        outcome["acked"] = bool(c2.execute(named("ack_jobs"), ack).fetchall())

    threads = [threading.Thread(target=reaper), threading.Thread(target=late_ack)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    if not outcome["reaped"] and not outcome["acked"]:
        # The reaper skipped the row while the ack held it, and the ack found it reaped?
        # Impossible; but a reaper that ran before the lease expired would: run it again.
        outcome["reaped"] = _reap(c1)
    return outcome["reaped"], outcome["acked"]


def _reap(conn: psycopg.Connection[Any]) -> bool:
    """Run the reaper; True if it recovered the (only) expired job."""
    row = conn.execute("SELECT pgqueue.reap()").fetchone()
    return row is not None and row[0] == 1


def _wait_blocked(c1: psycopg.Connection[Any], c2: psycopg.Connection[Any]) -> None:
    blocked = c2.info.backend_pid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with psycopg.connect(c1.info.dsn, autocommit=True) as watcher:
            row = watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (blocked,)
            ).fetchone()
        if row and row[0] == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError("the late ack never blocked on the reaper's row lock")


# -- 4. PostgreSQL restarts -------------------------------------------------------------------


def postgres_restarts(env: Env, size: str) -> Report:
    """``pg_ctl restart -m immediate`` (a crash: no shutdown checkpoint, every connection cut)
    several times while jobs flow."""
    assert env.restart is not None, "this scenario needs a server it may restart"
    settings = Settings(
        jobs=pick(size, 2500, 30_000),
        workers=pick(size, 3, 8),
        concurrency=8,
        lease=3.0,
        job_ms=2.0,
        rate=pick(size, 250.0, 700.0),
        tx_every=2,
    )
    restarts = pick(size, 3, 8)
    with run("4. PostgreSQL restart -m immediate", env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        for _ in range(restarts):
            time.sleep(pick(size, 2.0, 4.0))
            if chaos.finished():
                break
            crash_server(chaos, env)
        chaos.drain()
        count_lost_claims(chaos)
        return chaos.report()


# -- 5. network cuts ---------------------------------------------------------------------------


def network_cuts(env: Env, size: str) -> Report:
    """Half the workers reach PostgreSQL through a proxy that resets every connection and
    refuses new ones for 5 s, or blackholes traffic for longer than the lease; the other half
    (and the effects ledger) stay connected, reap the cut workers' jobs and run them."""
    settings = Settings(
        jobs=pick(size, 3000, 30_000),  # CI: 12 s of production, room for both cuts
        workers=4,
        concurrency=8,
        lease=2.0,
        job_ms=50.0,  # long enough that the cut workers hold jobs when the cut comes
        rate=pick(size, 250.0, 300.0),  # 32 slots x 50 ms: 640 jobs/s at most
        tx_every=2,
    )
    cuts = pick(size, ["drop", "pause"], ["drop", "pause"] * 4)
    proxy = Proxy(env.dsn).start()
    proxied = {0, 1}
    try:
        with run(
            "5. network cut (reset 5 s / blackhole 2x lease)",
            env.dsn,
            settings,
            env.workdir,
            worker_dsn=lambda i: proxy.dsn() if i in proxied else env.dsn,
            worker_env=lambda i: {"CHAOS_LEDGER_DSN": env.dsn},
        ) as chaos:
            chaos.start_workers()
            chaos.start_producer()
            cut_ids: set[str] = set()
            for mode in cuts:
                time.sleep(2.0)
                if chaos.finished():
                    break
                ids = [w for i in proxied for w in chaos.worker_ids(i)]
                cut_ids.update(ids)
                # Cut while the far side holds jobs (it gets fewer: the proxy is slower).
                chaos.wait(_holding(chaos, ids), 30, "the cut workers to hold jobs")
                # The cut's own instant, not the sample's after it: claims_cut looks from a
                # second before it (on a loaded machine the sleep and the sample below took
                # more than that, and a claim cut just before the cut was missed).
                cut_at = now()
                proxy.drop() if mode == "drop" else proxy.pause()
                time.sleep(0.2)  # statements already delivered still commit: count them
                kind = "reset 5 s" if mode == "drop" else "blackhole 2x lease"
                fault = chaos.fault(kind, chaos.held(ids), at=cut_at)
                time.sleep(5.0 if mode == "drop" else settings.lease * 2.5)
                proxy.heal()
                fault.healed_at = now()
            chaos.drain()
            count_claims_cut(chaos, sorted(cut_ids))
            report = chaos.report()
    finally:
        proxy.close()
    return report


def _holding(chaos: Run, worker_ids: list[str]) -> Callable[[], bool]:
    return lambda: bool(chaos.held(worker_ids)) or chaos.finished()


def ambiguous_commits(env: Env, size: str) -> Report:
    """The reply to a committed statement is lost and the connection reset: for an ack (the
    worker retries it, finds the job gone, and must not run it again), for a claim (the
    worker asks before it claims again: the jobs of a claim that committed run on, or go back
    to the queue at once if its rows never came) and
    for a transactional job's COMMIT (the handler asks the server, finds it committed, and the
    job is complete: it must not run again)."""
    settings = Settings(
        # The lease outlasts the reconnect, so the worker knows a retried ack's first try
        # committed (see pgqueue/worker/leases.py).
        jobs=pick(size, 60, 400), workers=1, concurrency=4, lease=3.0, job_ms=50.0,
        # --no-prepare: the statement text travels with every execution, so the trap sees it.
        worker_args=("--no-prepare",), tx_every=2,
    )  # fmt: skip
    proxy = Proxy(env.dsn).start()
    traps = {
        # A transactional job's COMMIT: the handler asks the server whether it committed.
        "commit": TRANSACTION_COMMIT,
        # The completer's ack (a transactional job's completion is another statement).
        "ack": b"SELECT id, cancel_requested FROM done",
        "claim": b"WITH candidates AS MATERIALIZED",
    }
    try:
        with run(
            "5b. ambiguous commit (claim, ack, transaction)",
            env.dsn,
            settings,
            env.workdir,
            worker_dsn=lambda i: proxy.dsn(),
            worker_env=lambda i: {"CHAOS_LEDGER_DSN": env.dsn},
        ) as chaos:
            chaos.start_workers()
            chaos.start_producer()
            for what, pattern in traps.items():
                before = proxy.trapped
                held = chaos.held()
                proxy.trap(pattern)
                chaos.wait(_more_than(proxy, before), 60, f"a {what} to trap")
                # An ambiguous claim interrupts the jobs it claimed, an ambiguous ack none.
                claimed = [j for j in chaos.held() if j not in held] if what == "claim" else []
                chaos.fault(f"ambiguous {what}", claimed, healed_at=now())
            chaos.drain()
            report = chaos.report()
    finally:
        proxy.close()
    report.notes["ambiguous commits"] = proxy.trapped
    report.notes["transactions found committed"] = chaos.fleet.log_text().count(
        "COMMIT reply was lost; it committed"
    )
    logs = chaos.fleet.log_text()
    report.notes["acks found already written"] = logs.count("ack already written")
    report.notes["stale ack warnings"] = logs.count("stale ack ignored") + logs.count(
        "ack found nothing to write"
    )
    # The ambiguous claim, settled before the worker's next claim (not by the reaper).
    report.notes["claims found committed"] = logs.count("claim committed though its reply")
    report.notes["claims handed back"] = logs.count("claimed jobs handed back")
    return report


def late_claim_replies(env: Env, size: str) -> Report:
    """The rows of a claim reach the worker two and a half leases late (the proxy holds the
    reply back: a lossy link retransmitting, or a loop a handler blocks while the rows wait
    in the socket), again and again, among a steady stream. Meanwhile the reapers take the
    jobs of a claim that committed back and another claim runs them; an idle worker's claim
    commits only when its rows are read. The worker must confirm such rows before it starts
    their jobs: nothing is interrupted, so no job may even start twice."""
    lease = 2.0
    settings = Settings(
        # Jobs of a second arriving about as fast as the 16 slots run them: a worker mostly
        # has jobs running when it claims (a busy claim, committed at once) and finds some
        # waiting, and a job outlasts the reapers' interval (0.5 s).
        jobs=pick(size, 240, 1200),
        workers=2,
        concurrency=8,
        lease=lease,
        job_ms=1000.0,
        rate=pick(size, 14.0, 14.0),
        # --no-prepare: the claim's text travels with every claim, so the trap sees it.
        worker_args=("--no-prepare", "--log-level", "INFO"),
    )
    proxy = Proxy(env.dsn).start()
    try:
        with run(
            "5c. claim replies late (2.5 leases)",
            env.dsn,
            settings,
            env.workdir,
            worker_dsn=lambda i: proxy.dsn(),
        ) as chaos:
            chaos.start_workers()
            chaos.start_producer()
            for _ in range(pick(size, 4, 12)):
                before = proxy.trapped
                proxy.trap(b"WITH candidates AS MATERIALIZED", lose="delay", hold=2.5 * lease)
                chaos.wait(_more_than(proxy, before), 60, "a claim to hold back")
                chaos.fault("claim reply late", [])  # nothing may run twice
                time.sleep(2.5 * lease + 1.0)
            chaos.drain()
            report = chaos.report()
    finally:
        proxy.close()
    logs = chaos.fleet.log_text()
    report.notes["jobs started twice"] = chaos.started_twice()
    report.notes["claims held back"] = proxy.trapped
    report.notes["late claims confirmed"] = logs.count("claim came late: leases extended")
    report.notes["late claims with jobs taken back"] = logs.count(
        "claim came late: jobs taken back meanwhile"
    )
    return report


def _more_than(proxy: Proxy, before: int) -> Callable[[], bool]:
    return lambda: proxy.trapped > before


# -- 6. clock skew ----------------------------------------------------------------------------


def clock_skew(env: Env, size: str) -> Report:
    """Workers whose wall clocks are a day ahead and a day behind run jobs longer than their
    lease (heartbeats keep them). Leases, run_at and the reaper use the database clock, so no
    job may be reclaimed early: every job runs exactly once, on its first claim."""
    settings = Settings(
        jobs=pick(size, 16, 200),
        workers=2,
        concurrency=8,
        lease=1.0,
        job_ms=2500.0,
        rate=pick(size, None, 4.0),  # 16 slots x 2.5 s: 6.4 jobs/s at most
    )
    skews = [86_400.0, -86_400.0]
    skewed = (sys.executable, "-m", "tests.chaos.skewed")
    with run(
        "6. clock skew (+/-1 day)",
        env.dsn,
        settings,
        env.workdir,
        command=skewed,
        worker_env=lambda i: {"CHAOS_CLOCK_SKEW": str(skews[i % 2])},
    ) as chaos:
        # A producer a day behind asks for a 2 s delay: run_at is the database's now() + 2 s.
        probe = subprocess.run(
            [*skewed, "enqueue", "chaos.work", "--args", f'{{"n": {settings.jobs}}}',
             "--delay", "2s", "--dsn", env.dsn],
            env={**os.environ, "CHAOS_CLOCK_SKEW": "-86400"},
            capture_output=True,
            check=True,
        )  # fmt: skip
        delay = scalar(
            env.dsn,
            "SELECT extract(epoch FROM run_at - created_at) FROM pgqueue.jobs WHERE id = %s",
            (int(probe.stdout),),
        )
        chaos.start_workers()
        chaos.start_producer()
        chaos.drain()
        report = chaos.report()
    report.notes["delay from a skewed producer (s)"] = float(delay)
    report.notes["premature reclaims"] = int(
        scalar(env.dsn, "SELECT count(*) FROM chaos_done WHERE token <> 1")
        + scalar(env.dsn, "SELECT count(*) FROM chaos_ledger WHERE event = 'start' AND token <> 1")
    )
    # Proof the skew was live: each worker's log lines carry its own (wrong) date.
    dates = set(re.findall(r"^(\d{4}-\d\d-\d\d) ", chaos.fleet.log_text(), re.MULTILINE))
    report.notes["worker log dates"] = sorted(dates)
    return report


# -- 7. poison pill ---------------------------------------------------------------------------


def poison_pill(env: Env, size: str, *, with_poison: bool = True) -> Report:
    """A job that calls ``os._exit(1)`` every time it runs, among a steady stream of normal
    jobs; crashed workers are restarted (as a supervisor would). It must be dead-lettered after
    its max attempts (3); the other jobs' pickup latency is reported (compare the control run)."""
    settings = Settings(
        jobs=pick(size, 1500, 20_000),
        workers=3,
        concurrency=4,
        lease=2.0,
        job_ms=5.0,
        # Well below capacity, so latency shows the poison's effect rather than a backlog.
        rate=pick(size, 150.0, 250.0),
    )
    name = "7. poison pill (os._exit)" if with_poison else "7. control (no poison)"
    with run(name, env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        if with_poison:
            chaos.enqueue_extra("chaos.poison", settings.jobs, max_attempts=3)
        while not chaos.finished():
            for index in chaos.fleet.exited():
                # It died holding jobs: those were interrupted by the poison.
                held = chaos.held(_last_ids(chaos, index))
                chaos.fault("poison crash", held)
                chaos.fleet.spawn(index)
            time.sleep(0.05)
        chaos.drain()
        report = chaos.report()
    report.notes["poison dead-lettered after"] = scalar(
        env.dsn, "SELECT attempts FROM pgqueue.dead_letters WHERE task = 'chaos.poison'"
    )
    return report


def _last_ids(chaos: Run, index: int) -> list[str]:
    rows = query(
        chaos.dsn,
        "SELECT id::text FROM pgqueue.workers WHERE pid = %s",
        (chaos.fleet.pid(index),),
    )
    return [row[0] for row in rows]


# -- 8. burst ---------------------------------------------------------------------------------


def burst(env: Env, size: str) -> Report:
    """A burst enqueued by COPY (10,000-job batches) while workers drain it: no deadlocks."""
    settings = Settings(
        jobs=pick(size, 20_000, 1_000_000),
        workers=pick(size, 3, 6),
        concurrency=16,
        lease=10.0,
        job_ms=0.0,
        enqueue_batch=10_000,
        drain_timeout=pick(size, 180.0, 3600.0),
    )
    with run("8. burst by COPY while draining", env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        chaos.drain()
        report = chaos.report()
    report.notes["deadlock errors in logs"] = chaos.fleet.log_text().count("deadlock")
    assert report.drain_s is not None
    report.notes["jobs/s"] = round(report.enqueued / report.drain_s)
    return report


# -- 9. LISTEN connection terminated ----------------------------------------------------------


def listen_terminated(env: Env, size: str) -> Report:
    """The worker's LISTEN connection is terminated (pg_terminate_backend) and cannot come
    back for a while (its route is cut): pickup falls back to polling (every 10 s here); once
    the route heals the listener reconnects and pickup is immediate again."""
    poll = 10.0
    proxy = Proxy(env.dsn).start()
    settings = Settings(
        jobs=0,
        workers=1,
        concurrency=4,
        poll_interval=poll,
        job_ms=0.0,
        worker_args=("--listen-dsn", proxy.dsn()),
    )
    probes = pick(size, 2, 10)
    latencies: dict[str, list[float]] = {"push": [], "polling": [], "push again": []}
    try:
        with run("9. LISTEN terminated", env.dsn, settings, env.workdir) as chaos:
            chaos.start_workers()
            listener = _wait_listener(env.dsn)
            for _ in range(probes):
                latencies["push"].append(_probe(chaos, poll * 3))
            proxy.drop()  # no way back until healed
            query(env.dsn, "SELECT pg_terminate_backend(%s)", (listener,))
            fault = chaos.fault("LISTEN terminated", [])
            for _ in range(probes):
                latencies["polling"].append(_probe(chaos, poll * 3))
            proxy.heal()
            fault.healed_at = now()
            _wait_listener(env.dsn, other_than=listener)
            time.sleep(0.5)  # the reconnect woke the fetcher; its next poll is ~10 s away
            for _ in range(probes):
                latencies["push again"].append(_probe(chaos, poll * 3))
            report = chaos.report()
    finally:
        proxy.close()
    report.enqueued = 3 * probes
    for phase, values in latencies.items():
        report.notes[f"{phase} pickup (ms)"] = round(max(values) * 1000)
    report.p99_ms = max(latencies["push again"]) * 1000
    return report


def _wait_listener(dsn: str, other_than: int | None = None, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = query(
            dsn,
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'pgqueue listener %%'"
            " AND query LIKE 'LISTEN%%' OR (application_name LIKE 'pgqueue listener %%'"
            " AND query = 'SELECT 1')",
        )
        pids = [row[0] for row in rows if row[0] != other_than]
        if pids:
            return int(pids[0])
        time.sleep(0.1)
    raise AssertionError("the listener did not (re)connect")


def _probe(chaos: Run, timeout: float) -> float:
    """Enqueue one job and return how long it took to start (database clock)."""
    n = 1_000_000 + int(scalar(chaos.dsn, "SELECT count(*) FROM chaos_ledger"))
    job = chaos.enqueue_extra("chaos.work", n)
    chaos.wait(
        lambda: bool(
            scalar(chaos.dsn, "SELECT count(*) FROM chaos_ledger WHERE job_id = %s", (job,))
        ),
        timeout,
        "a probe job to be picked up",
    )
    chaos.wait(lambda: chaos.remaining() == 0, timeout, "the probe job to finish")
    return float(
        scalar(
            chaos.dsn,
            "SELECT extract(epoch FROM min(l.at) - d.created_at) FROM chaos_ledger AS l"
            " JOIN chaos_done AS d ON d.job_id = l.job_id WHERE l.job_id = %s"
            " GROUP BY d.created_at",
            (job,),
        )
    )


# -- 10. handlers that block the event loop ----------------------------------------------------


def loop_stalls(env: Env, size: str) -> Report:
    """Every 200th job blocks its worker's event loop for three leases (``time.sleep`` in an
    ``async def``), among a steady stream of normal jobs. The blocked worker's heartbeats stop;
    its watchdog thread keeps its leases, so no job is reclaimed while it still runs: no
    interruption, and so no duplicate is allowed at all."""
    lease = 1.0
    settings = Settings(
        jobs=pick(size, 2000, 20_000),
        workers=3,
        concurrency=8,
        lease=lease,
        job_ms=2.0,
        rate=pick(size, 300.0, 400.0),
        block_every=200,
        block_ms=3 * lease * 1000,
    )
    with run(
        "10. handlers block the event loop (3 leases)", env.dsn, settings, env.workdir
    ) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        chaos.drain()
        report = chaos.report()
    logs = chaos.fleet.log_text()
    report.faults = logs.count("event loop blocked for")
    report.notes["stalls reported"] = report.faults
    report.notes["jobs started twice"] = chaos.started_twice()
    report.notes["leases lost"] = logs.count("lease lost")
    return report


# -- 11. a log output that never reads ---------------------------------------------------------


def unread_log_pipe(env: Env, size: str) -> Report:
    """Every worker logs (INFO, a line or two per job) into a pipe nobody reads until the end,
    like a stuck log shipper: the pipe fills after a few hundred lines. Claims, heartbeats and
    acks must go on (records are dropped and counted instead): every job done once."""
    settings = Settings(
        # Enough lines per worker to fill the pipe (64 KiB) and then pgqueue's log queue
        # (10,000 records) behind it: two lines per job.
        jobs=pick(size, 16_000, 100_000),
        workers=2,
        concurrency=16,
        lease=2.0,
        job_ms=0.0,
        unread_pipe=True,
        worker_args=("--log-level", "INFO"),
    )
    with run("11. log output never read (full pipe)", env.dsn, settings, env.workdir) as chaos:
        chaos.start_workers()
        chaos.start_producer()
        chaos.drain()
        report = chaos.report()
    logs = chaos.fleet.log_text()
    report.faults = settings.workers
    report.notes["drop reports"] = logs.count("log records dropped")
    report.notes["leases lost"] = logs.count("lease lost")
    report.notes["jobs started twice"] = chaos.started_twice()
    return report


# -- 12. child processes die mid-job (--pool process) ------------------------------------------


def child_crashes(env: Env, size: str) -> Report:
    """Sync handlers in child processes (``--pool process``); every 100th job kills the child
    running it on its first attempt (``os._exit(3)`` or SIGKILL, as the OOM killer does). Each
    crash must fail only its own job, at once (no waiting for a lease), which runs again in a
    new child; the workers never die."""
    settings = Settings(
        jobs=pick(size, 1500, 10_000),
        workers=2,
        concurrency=4,
        lease=30.0,  # long: a crashed job must come back because its child died, not the reaper
        job_ms=2.0,
        crash_every=100,
        worker_args=("--pool", "process"),
        tx_every=2,
    )
    name = "12. child processes die mid-job (--pool process)"
    with run(name, env.dsn, settings, env.workdir, task="chaos.sync_work") as chaos:
        chaos.start_workers()
        chaos.start_producer()
        chaos.drain()
        crashed = query(
            env.dsn,
            "SELECT job_id FROM chaos_ledger WHERE event = 'start' AND attempt = 1"
            "   AND n %% %s = 0 AND n < %s",
            (settings.crash_every, settings.jobs),
        )
        chaos.fault("child crash", [row[0] for row in crashed])
        worker_exits = len(chaos.fleet.exited())
        report = chaos.report()
    logs = chaos.fleet.log_text()
    report.faults = len(crashed)
    report.notes["crash errors logged"] = logs.count("child process")
    report.notes["workers that exited"] = worker_exits
    report.notes["reaped"] = logs.count("recovered jobs with expired leases")
    return report


# -- 13. PostgreSQL failover to a streaming standby -------------------------------------------


def failover(env: Env, size: str, synchronous: bool = True, lag: float = 0.0) -> Report:
    """A primary and a streaming standby (Debian's PostgreSQL 15); producers and workers on the
    multi-host DSN HA setups use (``host=a,b target_session_attrs=read-write``). Mid-run the
    primary is killed (``pg_ctl stop -m immediate``) and, after a detection delay, the standby
    promoted. Nobody restarts anything: producers and workers find the new primary themselves.
    The effects ledger lives on a third server (``env.dsn``): the failover must not take it
    along. Synchronous replication: every job whose enqueue returned is done (lost 0).
    Asynchronous: what the standby had not received at the crash is gone. On one machine a
    standby is microseconds behind, so ``lag`` holds its stream back for that many seconds
    before the crash, as a congested link would: the figures say what such a lag costs."""
    from tests.debian_pg import replicated_pair

    settings = Settings(
        jobs=pick(size, 3000, 30_000),
        workers=2,
        concurrency=8,
        # Longer than the failover: the workers' leases survive it, so nothing needs the
        # reaper, and a retried ack knows whether its first try committed.
        lease=pick(size, 10.0, 10.0),
        job_ms=2.0,
        rate=pick(size, 300.0, 600.0),
    )
    failovers_at = pick(size, 4.0, 20.0)  # seconds of production before the crash
    detection = 1.0  # how long failover tooling takes to declare the primary dead
    mode = "sync" if synchronous else "async"
    name = f"13{'a' if synchronous else 'b'}. failover to a standby ({mode} replication)"
    with replicated_pair(synchronous, lag_control=bool(lag)) as pair:
        pair.primary.create_pgqueue_database("chaos")
        dsn = pair.dsn("chaos")
        with run(name, dsn, settings, env.workdir, ledger_dsn=env.dsn) as chaos:
            chaos.start_workers()
            chaos.start_producer()
            chaos.wait(
                lambda: chaos.enqueued >= failovers_at * (settings.rate or 0) or chaos.finished(),
                60,
                "the producer to get going",
            )
            enqueued_at_lag = survivors = chaos.enqueued
            if lag:
                # What was enqueued a second before the stream stops is surely on the standby
                # (it is microseconds behind here): nothing older may be rolled back.
                time.sleep(1.0)
                enqueued_at_lag = chaos.enqueued
                pair.replication.pause()
                time.sleep(lag)
            held = chaos.held()
            unreplicated = pair.unreplicated_bytes()
            fault = chaos.fault("failover", held)
            enqueued_at_crash = chaos.enqueued
            pair.kill_primary()
            time.sleep(detection)
            pair.promote()
            promoted_at = fault.healed_at = now()
            # As for a crash (scenario 4): what the new primary shows as running is exactly what
            # the crash left held (read before the workers reconnect), plus the sample above.
            fault.held = sorted({*held, *chaos.held()})
            chaos.deadlocks_before = chaos.deadlocks()  # the new primary's own statistics
            chaos.drain()
            # And the jobs whose claim was on its way (committed on the old primary but not yet
            # on the standby, or not at all) when it died: they ran already, the new primary
            # hands them out again.
            lost_claims = chaos.lost_claims(fault, promoted_at)
            fault.held = sorted({*fault.held, *lost_claims})
            exited = chaos.fleet.exited()
            report = chaos.report()
        first_done = scalar(dsn, "SELECT min(at) FROM chaos_done WHERE at > %s", (promoted_at,))
        # Jobs the new primary has no trace of (never done there, never dead): their enqueue
        # committed on the old primary only. Those that ran before the crash kept their effect
        # (the ledger is the application's own database), the others are the lost ones.
        known = {
            row[0]
            for row in query(
                dsn,
                "SELECT n FROM chaos_done UNION SELECT (args ->> 'n')::bigint"
                "  FROM pgqueue.dead_letters",
            )
        }
        rolled_back = [n for n in range(chaos.enqueued) if n not in known]
        older = [n for n in rolled_back if n < survivors]
    logs = chaos.fleet.log_text()
    report.notes["unreplicated WAL at the crash (bytes)"] = unreplicated
    report.notes["enqueued before the crash"] = enqueued_at_crash
    if lag:
        report.notes["standby lag (s)"] = lag
        report.notes["enqueued during the lag"] = enqueued_at_crash - enqueued_at_lag
    report.notes["enqueues the failover rolled back"] = len(rolled_back)
    report.notes["rolled back from before the lag"] = len(older)
    # What the standby had not received is gone with the old primary (asynchronous replication
    # promises no more); anything enqueued before the lag began is not.
    report.lost_by_design = len(rolled_back) - len(older)
    report.notes["of which had run before the crash"] = len(rolled_back) - report.lost
    report.notes["first job done after the promote (s)"] = (
        None if first_done is None else round((first_done - promoted_at).total_seconds(), 2)
    )
    report.notes["producer errors"] = chaos.producer_errors
    report.notes["workers that exited"] = len(exited)
    report.notes["acks found already written"] = logs.count("ack already written")
    report.notes["stale ack warnings"] = logs.count("stale ack ignored") + logs.count(
        "ack found nothing to write"
    )
    report.notes["claims the failover lost (run again under their token)"] = len(lost_claims)
    report.notes["writes of claims the database lost"] = logs.count(
        "does not know this worker's claim"
    )
    return report


def failover_async(env: Env, size: str) -> Report:
    return failover(env, size, synchronous=False, lag=pick(size, 1.0, 2.0))


SCENARIOS: dict[str, Callable[[Env, str], Report]] = {
    "sigkill": sigkill_workers,
    "sigstop": sigstop_past_lease,
    "race": reaper_vs_late_ack,
    "restart": postgres_restarts,
    "network": network_cuts,
    "ambiguous": ambiguous_commits,
    "late": late_claim_replies,
    "skew": clock_skew,
    "poison": poison_pill,
    "burst": burst,
    "listen": listen_terminated,
    "stalls": loop_stalls,
    "logpipe": unread_log_pipe,
    "children": child_crashes,
    "failover": failover,
    "failover-async": failover_async,
    "durable": durable_jobs,
    "horizon": held_snapshot,
}

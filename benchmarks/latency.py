"""Enqueue -> start latency with an idle worker, stage by stage, fsync on.

    python -m benchmarks.latency [--dsn DSN] [--jobs 2000] [--rate 100] [--runs 3]
                                 [--kinds async,sync] [--no-stages] [--tree PATH ...]

Starts an embedded PostgreSQL with stock settings (``fsync`` and ``synchronous_commit`` on;
refuses a server where either is off) unless ``--dsn`` is given, and one ``pgq work
benchmarks.latency_tasks:pgq`` process (``--concurrency 64``). One producer enqueues one job
per transaction with ``PgQueue.enqueue`` at ``--rate`` jobs/s, so the worker is idle whenever a
job arrives. Per job, wall clock (same machine):

    sent -> woken (the listener passes the NOTIFY on) -> fetcher runs -> claim sent -> claim's
    rows back -> handler starts

and the producer's own call (sent -> the enqueue returned).

The stages come from ``benchmarks/latency_tasks.py`` (timestamps written by the worker; leave
them out with ``--no-stages``: the figures then carry no instrumentation cost). As a floor, the
same run also times the raw round trip: ``INSERT`` + ``pg_notify`` committed on a minimal table
and received by a plain ``LISTEN`` connection in this process's thread (``raw``), and the same
until the rows of a minimal claim of the job are back (``raw+claim``: ``BEGIN`` and an ``UPDATE
... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``, pipelined, from the listening
thread; its ``COMMIT`` follows unwaited, as a pgqueue worker's idle claim does).

``--handoff-floor`` adds two floors: what a job handed to an idle worker by the producer
itself would cost at best. The producer inserts the job into ``pgqueue.jobs`` already running
under a worker id and a lease, and its ``pg_notify`` names it. ``handoff``: the figure is taken
when the listening thread has the NOTIFY (the job started unconfirmed); ``handoff+confirm``:
when the rows of pgqueue's own ``confirm_claims`` extending that lease are back (pipelined
after ``BEGIN``, its ``COMMIT`` unwaited). Nothing in pgqueue hands jobs over: this measures
the design before building it (docs/benchmarks.md).

``--tree PATH`` (repeatable) measures the pgqueue of other checkouts too, interleaved with this
one in every run (a copy of ``latency_tasks.py`` runs their worker and producer), so a change
is measured against its base on the same machine at the same time.

Prints, per kind (``async def`` / ``def`` handler) and run, p50 / p99 / p99.9 of the total and
the median of each stage; then the medians over the runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import fresh_database, machine, server

ROOT = Path(__file__).resolve().parent.parent
APP = "pgq_latency_tasks:pgq"
TASKS = {"async": "latency.async", "sync": "latency.sync"}
STAGES = ("enqueue", "notify", "fetcher", "claim_sent", "claim", "start")
READY_TIMEOUT = 60.0


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def check_durable(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        for name in ("fsync", "synchronous_commit"):
            row = conn.execute(f"SHOW {name}").fetchone()
            if not row or row[0] != "on":
                sys.exit(f"{name} is {row[0] if row else '?'} on this server: latency needs it on")


def system_under_test(tree: Path, tmp: Path) -> dict[str, str]:
    """The environment that runs ``tree``'s pgqueue with a copy of latency_tasks.py."""
    module = tmp / "pgq_latency_tasks.py"
    if not module.exists():
        module.write_text((ROOT / "benchmarks" / "latency_tasks.py").read_text())
    return {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{tree}"}


def environments(trees: dict[str, Path], tmp: Path) -> dict[str, dict[str, str]]:
    """Per checkout to measure, the environment of its processes (see system_under_test)."""
    envs = {}
    for name, tree in trees.items():
        (tmp / name.replace("/", "_")).mkdir()
        envs[name] = system_under_test(tree, tmp / name.replace("/", "_"))
    return envs


def databases(admin: str, envs: dict[str, dict[str, str]]) -> dict[str, str]:
    """Per checkout, a database of its own, migrated by that checkout's ``pgq migrate``: a
    checkout refuses a schema newer than its own (one measured against its base may add a
    revision)."""
    dsns = {}
    for number, (name, env) in enumerate(envs.items()):
        dsn = fresh_database(admin, f"pgqueue_latency_{number}", migrated=False)
        command = [sys.executable, "-m", "pgqueue.cli", "migrate", "--dsn", dsn]
        cwd = env["PYTHONPATH"].split(os.pathsep)[-1]
        subprocess.run(command, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        dsns[name] = dsn
    return dsns


def start_worker(
    dsn: str, stages: Path, env: dict[str, str], concurrency: int = 64
) -> subprocess.Popen[bytes]:
    env = {**env, "PGQUEUE_DSN": dsn, "BENCH_STAGES_FILE": str(stages)}
    command = [
        sys.executable, "-m", "pgqueue.cli", "work", APP,
        "--concurrency", str(concurrency), "--log-level", "WARNING",
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=env["PYTHONPATH"].split(os.pathsep)[-1], env=env)


def wait_listening(dsn: str, proc: subprocess.Popen[bytes]) -> None:
    """Until the worker's listener is connected and the fetcher has gone idle."""
    deadline = time.monotonic() + READY_TIMEOUT
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                sys.exit(f"the worker exited early ({proc.returncode})")
            listening = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE"
                " 'pgqueue listener%%' AND datname = current_database()"
            ).fetchone()
            idle = conn.execute("SELECT count(*) FROM pgqueue.idle_workers").fetchone()
            if listening and listening[0] and idle and idle[0]:
                time.sleep(0.5)  # the handshake and its last claim
                return
            time.sleep(0.1)
    sys.exit("the worker did not start listening")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def produce(
    dsn: str, task: str, jobs: int, rate: float, env: dict[str, str], tmp: Path
) -> dict[int, tuple[float, float]]:
    """Job id -> (sent, the enqueue returned), from a producer process of the tree."""
    out = Path(tempfile.mkstemp(dir=tmp, prefix="sent-")[1])
    command = [sys.executable, "-m", "pgq_latency_tasks", dsn, task, str(jobs), str(rate), str(out)]
    subprocess.run(command, env=env, check=True, cwd=env["PYTHONPATH"].split(os.pathsep)[-1])
    return {int(k): (v[0], v[1]) for k, v in json.loads(out.read_text()).items()}


Claim = tuple[float, float, list[int]]  # sent, returned, job ids


def read_stages(path: Path) -> tuple[list[float], list[float], list[Claim], dict[int, float]]:
    wakes: list[float] = []
    fetches: list[float] = []
    claims: list[Claim] = []
    starts: dict[int, float] = {}
    for line in path.read_text().splitlines():
        kind, *fields = line.split()
        if kind == "wake":
            wakes.append(float(fields[0]))
        elif kind == "fetch":
            fetches.append(float(fields[0]))
        elif kind == "claim":
            claims.append((float(fields[0]), float(fields[1]), [int(f) for f in fields[2:]]))
        elif kind == "start":
            starts[int(fields[1])] = float(fields[0])
    return wakes, fetches, claims, starts


def last_between(times: list[float], low: float, high: float) -> float | None:
    found = [t for t in times if low <= t <= high]
    return found[0] if found else None


def stage_breakdown(
    sent: dict[int, tuple[float, float]], path: Path
) -> tuple[list[float], dict[str, list[float]]]:
    """Totals (ms) and, per stage, its time (ms): ``enqueue`` the producer's call (sent to
    committed); then from ``sent``, one after the other: the listener passing the NOTIFY on,
    the fetcher running, the claim sent, the claim's rows back, the handler starting. The
    listener often has the NOTIFY before the producer's call returns. Only jobs whose every
    stage was seen in order (a job a claim in flight took has no wake-up of its own)."""
    wakes, fetches, claims, starts = read_stages(path)
    claim_of = {job_id: (s, r) for s, r, ids in claims for job_id in ids}
    totals: list[float] = []
    parts: dict[str, list[float]] = {name: [] for name in STAGES}
    for job_id, (t0, t1) in sent.items():
        started = starts.get(job_id)
        if started is None:
            continue
        totals.append((started - t0) * 1e3)
        claim = claim_of.get(job_id)
        if claim is None:
            continue
        claim_sent, claim_back = claim
        woke = last_between(wakes, t0, claim_sent)
        fetched = last_between(fetches, woke or t0, claim_sent)
        if woke is None or fetched is None:
            continue
        marks = [t0, woke, fetched, claim_sent, claim_back, started]
        if marks != sorted(marks):
            continue
        parts["enqueue"].append((t1 - t0) * 1e3)
        for name, a, b in zip(STAGES[1:], marks, marks[1:], strict=False):
            parts[name].append((b - a) * 1e3)
    return totals, parts


#: The floor's claim: the job the NOTIFY announced, taken as a minimal queue takes it (its
#: rows are timed; the COMMIT follows unwaited, as a pgqueue worker's idle claim does).
RAW_CLAIM = (
    "UPDATE raw_latency SET state = 'running' WHERE id = (SELECT id FROM raw_latency"
    " WHERE state = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, args"
)


#: The hand-off floor's job: inserted already running under a worker and a lease, as a
#: producer's hand-off would leave it (the row's other columns take their defaults).
HANDOFF_INSERT = (
    "INSERT INTO pgqueue.jobs (queue, task, args, state, attempts, lease_token, worker_id,"
    " lease_expires_at, started_at) VALUES ('default', 'latency.handoff', '{}', 'running', 1, 1,"
    " %(worker_id)s::uuid, clock_timestamp() + interval '30 seconds', now()) RETURNING id"
)
HANDOFF_WORKER = "00000000-0000-4000-8000-00000000face"


#: Sends one job in the paced producer's transaction and returns what its NOTIFY carries
#: besides the send time.
Send = Callable[[psycopg.Connection[Any]], str]
#: Called once the job of a NOTIFY counts as started.
Started = Callable[[], None]
#: Runs in the listening thread for each NOTIFY (what ``Send`` returned, a second connection
#: of that thread, and what to call once the job counts as started).
Receive = Callable[[str, psycopg.Connection[Any], Started], None]


def timed_notifies(dsn: str, jobs: int, rate: float, send: Send, receive: Receive) -> list[float]:
    """``jobs`` committed at ``rate`` by one producer, each with a NOTIFY carrying its send
    time; a plain ``LISTEN`` in a thread of this process receives them: ms from each send to
    its ``receive`` saying it started."""
    received: list[float] = []
    ready = threading.Event()

    def started(sent: float) -> None:
        received.append(time.time() - sent)

    def listen() -> None:
        with (
            psycopg.connect(dsn, autocommit=True) as conn,
            psycopg.connect(dsn, autocommit=True) as second,
        ):
            conn.execute("LISTEN floor_latency")
            ready.set()
            for notify in conn.notifies(timeout=jobs / rate + 10, stop_after=jobs):
                extra, _, sent = notify.payload.rpartition(" ")
                receive(extra, second, functools.partial(started, float(sent)))

    listener = threading.Thread(target=listen)
    listener.start()
    ready.wait(10)
    with psycopg.connect(dsn) as conn:
        start = time.monotonic()
        for i in range(jobs):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with conn.transaction():
                t0 = time.time()
                extra = send(conn)
                payload = f"{extra} {t0!r}"
                conn.execute("SELECT pg_notify('floor_latency', %s)", (payload,), prepare=True)
    listener.join()
    return [r * 1e3 for r in received]


def handoff_floor(dsn: str, jobs: int, rate: float, *, confirm: bool = True) -> list[float]:
    """INSERT of a job already handed to a worker + pg_notify naming it, committed; received by
    a plain LISTEN (ms), then, with ``confirm``, confirmed by pgqueue's ``confirm_claims`` (ms
    to its rows)."""
    from pgqueue.db.queries import query

    confirm_claims = query("confirm_claims")

    def send(conn: psycopg.Connection[Any]) -> str:
        row = conn.execute(HANDOFF_INSERT, {"worker_id": HANDOFF_WORKER}, prepare=True).fetchone()
        assert row is not None
        return str(row[0])

    def receive(
        job_id: str, confirmer: psycopg.Connection[Any], started: Callable[[], None]
    ) -> None:
        if not confirm:
            started()
            return
        params = {
            "ids": [int(job_id)],
            "tokens": [1],
            "worker_id": HANDOFF_WORKER,
            "lease": timedelta(seconds=30),
        }
        with confirmer.pipeline():
            confirmer.execute("BEGIN", prepare=True)
            rows = confirmer.execute(confirm_claims, params, prepare=True).fetchall()
            started()
            confirmer.execute("COMMIT", prepare=True)
        assert rows, "the hand-off floor's confirm found its job"

    try:
        return timed_notifies(dsn, jobs, rate, send, receive)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgqueue.jobs WHERE task = 'latency.handoff'")


def raw_floor(dsn: str, jobs: int, rate: float, *, claim: bool = False) -> list[float]:
    """INSERT + pg_notify committed on a minimal table, received by a plain LISTEN (ms); with
    ``claim``, until the rows of a minimal claim of the job (in a transaction pipelined with
    its BEGIN, on a second connection of the listening thread) are back."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS raw_latency (id bigint GENERATED ALWAYS AS IDENTITY"
            " PRIMARY KEY, state text NOT NULL DEFAULT 'ready', args jsonb NOT NULL)"
        )
        conn.execute(
            "CREATE INDEX IF NOT EXISTS raw_latency_ready ON raw_latency (id) WHERE state = 'ready'"
        )

    def send(conn: psycopg.Connection[Any]) -> str:
        conn.execute("INSERT INTO raw_latency (args) VALUES ('{}')", prepare=True)
        return ""

    def receive(_: str, claimer: psycopg.Connection[Any], started: Started) -> None:
        if not claim:
            started()
            return
        with claimer.pipeline():
            claimer.execute("BEGIN", prepare=True)
            rows = claimer.execute(RAW_CLAIM, prepare=True).fetchall()
            started()
            claimer.execute("COMMIT", prepare=True)
        assert rows, "the floor's claim found its job"

    return timed_notifies(dsn, jobs, rate, send, receive)


def summary(values: list[float]) -> str:
    return (
        f"p50 {quantile(values, 0.5):.2f} ms, p99 {quantile(values, 0.99):.2f} ms, "
        f"p99.9 {quantile(values, 0.999):.2f} ms ({len(values)} jobs)"
    )


def run_once(
    dsn: str, kind: str, jobs: int, rate: float, env: dict[str, str], tmp: Path
) -> dict[str, Any]:
    path = Path(tempfile.mkstemp(dir=tmp, prefix=f"stages-{kind}-")[1])
    proc = start_worker(dsn, path, env)
    try:
        wait_listening(dsn, proc)
        sent = produce(dsn, TASKS[kind], jobs, rate, env, tmp)
        time.sleep(1.0)
    finally:
        stop(proc)
    totals, parts = stage_breakdown(sent, path)
    if len(totals) < jobs:
        print(f"  warning: {jobs - len(totals)} of {jobs} jobs did not start", flush=True)
    return {
        "p50": quantile(totals, 0.5),
        "p99": quantile(totals, 0.99),
        "p999": quantile(totals, 0.999),
        "stages": {k: statistics.median(v) for k, v in parts.items() if v},
        "staged": len(parts["start"]),
        "jobs": len(totals),
    }


def main(argv: list[str] | None = None) -> dict[str, list[Any]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", help="an existing server (default: a new embedded one)")
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--rate", type=float, default=100.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--kinds", default="async,sync")
    p.add_argument("--tree", type=Path, action="append", default=[], help="another checkout")
    p.add_argument(
        "--handoff-floor", action="store_true", help="also the floors of a producer's hand-off"
    )
    p.add_argument(
        "--allow-fsync-off", action="store_true", help="smoke tests: figures mean nothing"
    )
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    trees = {"this": ROOT, **{str(t): t.resolve() for t in args.tree}}
    with server(args.dsn) as admin, tempfile.TemporaryDirectory() as tmp:
        if not args.allow_fsync_off:
            check_durable(admin)
        dsn = fresh_database(admin, "pgqueue_latency")
        print(machine(dsn), flush=True)
        print(f"{args.jobs} jobs per run at {args.rate:g} jobs/s, fsync on", flush=True)
        envs = environments(trees, Path(tmp))
        dsns = databases(admin, envs)
        labels = [f"{kind} {name}" for kind in kinds for name in trees]
        floors = {"raw": False, "raw+claim": True}
        if args.handoff_floor:
            floors["handoff"] = False
            floors["handoff+confirm"] = True
        results: dict[str, list[dict[str, Any]]] = {label: [] for label in [*labels, *floors]}
        for run in range(args.runs):
            for floor_name, claim in floors.items():
                floor = (
                    handoff_floor(dsn, args.jobs, args.rate, confirm=claim)
                    if floor_name.startswith("handoff")
                    else raw_floor(dsn, args.jobs, args.rate, claim=claim)
                )
                results[floor_name].append(
                    {
                        "p50": quantile(floor, 0.5),
                        "p99": quantile(floor, 0.99),
                        "p999": quantile(floor, 0.999),
                    }
                )
                what = {
                    "raw": "-> LISTEN",
                    "raw+claim": "-> LISTEN -> claim's rows",
                    "handoff": "(a job handed over) -> LISTEN",
                    "handoff+confirm": "(a job handed over) -> LISTEN -> confirm's rows",
                }[floor_name]
                print(f"run {run + 1} raw INSERT+NOTIFY {what}: {summary(floor)}", flush=True)
            for kind in kinds:
                for name, env in envs.items():
                    result = run_once(dsns[name], kind, args.jobs, args.rate, env, Path(tmp))
                    results[f"{kind} {name}"].append(result)
                    stages = ", ".join(f"{k} {v:.3f}" for k, v in result["stages"].items())
                    print(
                        f"run {run + 1} {kind} {name}: p50 {result['p50']:.2f} ms, p99"
                        f" {result['p99']:.2f} ms, p99.9 {result['p999']:.2f} ms"
                        f" ({result['jobs']} jobs); stage medians (ms, {result['staged']} jobs):"
                        f" {stages}",
                        flush=True,
                    )
        print("\nmedian of runs (min-max):")
        for kind, rows in results.items():
            cells = []
            for key in ("p50", "p99", "p999"):
                values = [r[key] for r in rows]
                cells.append(
                    f"{key} {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
                )
            print(f"  {kind}: " + ", ".join(cells))
        print("BENCH-RESULT " + json.dumps(results), flush=True)
    return results


if __name__ == "__main__":
    main()

"""Single-job enqueue against the raw single insert, interleaved, fsync on.

    python -m benchmarks.enqueue_single [--dsn DSN] [--count 2000] [--rounds 5]
                                        [--producers 1,8] [--tree PATH ...]
                                        [--kinds sync,async,task,task_async,keyed,group,lone,side,
                                                 calls]
                                        [--commit-flush off]

One job per transaction (autocommit), P producer threads with a connection each. Every round
measures, each in a fresh process, one after the other:

* ``raw``: ``INSERT`` into a minimal table (``benchmarks.compare``'s raw ceiling);
* ``jobs INSERT``: pgqueue's own one-job statement (``insert_job``) sent by bare psycopg,
  prepared: the table, its constraints, indexes and triggers, no library;
* ``PgQueue.enqueue``: the library call, of this checkout and of each ``--tree`` (a checkout
  whose pgqueue the process imports instead, on a database its own revisions migrated), so a
  change is measured against its base in the same rounds; ``--kinds async`` adds
  ``enqueue_async`` (P tasks on one event loop), ``task`` a registered task's own
  ``job.enqueue()`` (the call an application writes), ``task_async`` its
  ``job.enqueue_async()`` (P tasks on one event loop), ``keyed`` a new idempotency key per job
  (the SQL function's path);
* ``--kinds group``: P producers sharing one client (this checkout's), as an application's
  threads or tasks do, with group commit on and off (``PgQueue(group_commit=...)``):
  ``group threads on|off`` (P threads, ``enqueue``), ``group tasks on|off`` (P tasks on one
  event loop, ``enqueue_async``);
* ``--kinds lone``: one producer alternating, call by call, a client with group commit on and
  one with it off (so the load drifts under both alike): the median call of each and their
  ratio, and what the group's bookkeeping costs a lone call (CPU, no database);
* ``--kinds side``: per tree, in one process on one client, the sync and the async call
  interleaved (``pgq.enqueue("bench.job", {})`` and ``enqueue_async``, ``job.enqueue()`` and
  ``job.enqueue_async()``; blocks of :data:`SIDE_BLOCK` calls, one producer, every round):
  the client's CPU per call (``time.process_time``) of each, median of the blocks, and the
  async/sync ratio (the machine's load moves both sides of a block alike);
* ``--kinds calls``: per tree, once (a count, not a time: the machine's load moves nothing),
  the Python function calls one single enqueue runs (``sys.setprofile``, the mean of
  :data:`COUNTED_CALLS` calls after a warm-up), all of them and those of pgqueue's own code,
  psycopg_pool's and logging's: the four calls of ``--kinds side``.

Prints, per variant and producer count, the median jobs/s, the median of the rounds' ratios
to ``raw`` with as many producers, and to ``raw`` with one (a single INSERT loop) when
``--producers`` has 1 (the machine's load moves all of a round together; the ratios move less),
and the client's CPU per job (µs: the producers' thread CPU time over the timed calls, the
event loop's for async). ``--commit-flush off`` runs every producer with
``synchronous_commit = off``: commits no longer wait for the disk, so what is left is the
statement's server time and the client's CPU (a change of a few microseconds is lost behind
an fsync on a shared machine).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

RAW_DDL = (
    "CREATE TABLE IF NOT EXISTS raw_jobs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " queue text NOT NULL DEFAULT 'default', args jsonb NOT NULL DEFAULT '{}',"
    " run_at timestamptz NOT NULL DEFAULT now());"
    " CREATE INDEX IF NOT EXISTS raw_jobs_claim_idx ON raw_jobs (queue, run_at, id)"
)
RAW_INSERT = "INSERT INTO raw_jobs (args) VALUES (%s::jsonb)"
ROOT = Path(__file__).resolve().parent.parent


def measure(variant: str, dsn: str, producers: int, count: int) -> tuple[float, float]:
    """One figure and the client's CPU µs per job, in this process (run by the parent with the
    tree's pgqueue on the path)."""
    if variant == "raw":

        def make() -> Callable[[], object]:
            conn = psycopg.connect(dsn, autocommit=True)
            return lambda: conn.execute(RAW_INSERT, ("{}",), prepare=True)

    elif variant == "jobs INSERT":
        from pgqueue.db.job_rows import single_params
        from pgqueue.db.queries import query
        from pgqueue.rules.job_specs import JobSpec

        # The statement's parameters as the client makes them (every column the job input
        # declares), for one plain job.
        params = single_params(
            JobSpec(task="bench.job", args_json="{}", queue="default", priority=0, max_attempts=5)
        )

        def make() -> Callable[[], object]:
            conn = psycopg.connect(dsn, autocommit=True)
            return lambda: conn.execute(query("insert_job"), params, prepare=True).fetchone()

    elif variant.startswith("PgQueue.enqueue_async"):
        return _async_rate(dsn, producers, count)

    elif variant.startswith("task.enqueue_async"):
        return _async_rate(dsn, producers, count, task=True)

    elif variant.startswith("group tasks"):
        return _async_rate(dsn, producers, count, group_commit=variant.endswith(" on"))

    elif variant.startswith("group threads"):
        from pgqueue import PgQueue

        shared = PgQueue(dsn, pool_size=producers, group_commit=variant.endswith(" on"))

        def make() -> Callable[[], object]:
            return lambda: shared.enqueue("bench.job", {})

    elif variant.startswith("task.enqueue"):
        from pgqueue import PgQueue

        def make() -> Callable[[], object]:
            app = PgQueue(dsn, pool_size=1)

            @app.task(name="bench.job")
            def job() -> None: ...

            return job.enqueue

    elif variant.startswith("PgQueue.enqueue keyed"):
        from pgqueue import PgQueue

        def make() -> Callable[[], object]:
            app = PgQueue(dsn, pool_size=1)
            keys = (f"{id(app)}-{n}" for n in itertools.count())
            return lambda: app.enqueue("bench.job", {}, idempotency_key=next(keys))

    else:
        from pgqueue import PgQueue

        def make() -> Callable[[], object]:
            app = PgQueue(dsn, pool_size=1)
            return lambda: app.enqueue("bench.job", {})

    from benchmarks.drivers.protocol import threaded_rate  # the tree's (standard library)

    spent: list[float] = []

    def timed_make() -> Callable[[], object]:
        # Each thread's CPU from its second call (the first warms up) to its last.
        enqueue = make()
        calls = 0
        started = 0.0

        def call() -> object:
            nonlocal calls, started
            calls += 1
            if calls == 2:
                started = time.thread_time()
            result = enqueue()
            if calls == count // producers + 1:
                spent.append(time.thread_time() - started)
            return result

        return call

    rate = threaded_rate(producers, count // producers, timed_make)
    return rate, sum(spent) / ((count // producers) * producers) * 1e6


def _bench_job() -> None:
    """The benchmark's task (never run here)."""


def _async_rate(
    dsn: str, producers: int, count: int, group_commit: bool | None = None, task: bool = False
) -> tuple[float, float]:
    """Jobs/s of ``producers`` tasks on one event loop, each awaiting ``enqueue_async`` in turn
    (a pool as large as the tasks), timed after a warm-up call each. ``group_commit``: the
    client's option (None: its default, for a checkout that may not have it); ``task``: a
    registered task's own ``job.enqueue_async()`` instead of the call by name."""
    import asyncio

    from pgqueue import PgQueue

    async def run() -> tuple[float, float]:
        options: dict[str, Any] = {} if group_commit is None else {"group_commit": group_commit}
        app = PgQueue(dsn, pool_size=producers, **options)
        enqueue: Callable[[], Any] = lambda: app.enqueue_async("bench.job", {})  # noqa: E731
        if task:  # (registered only then: the call by name is measured as it was)
            enqueue = app.task(name="bench.job")(_bench_job).enqueue_async

        await asyncio.gather(*(enqueue() for _ in range(producers)))

        async def producer() -> None:
            for _ in range(count // producers):
                await enqueue()

        started, cpu = time.perf_counter(), time.thread_time()
        await asyncio.gather(*(producer() for _ in range(producers)))
        done = (count // producers) * producers
        rate = done / (time.perf_counter() - started)
        cpu_us = (time.thread_time() - cpu) / done * 1e6
        await app.aclose()
        return rate, cpu_us

    return asyncio.run(run())


#: Calls per block of ``--kinds side`` (each side's CPU is read around a block).
SIDE_BLOCK = 200


def side_by_side(dsn: str, count: int) -> dict[str, float]:
    """One client, the sync and async calls interleaved in blocks of :data:`SIDE_BLOCK`
    (``count`` calls of each in all): each one's median CPU µs per call (``process_time``:
    the process's, so a pool's threads count too)."""
    import asyncio

    from pgqueue import PgQueue

    app = PgQueue(dsn, pool_size=1)

    @app.task(name="bench.job")
    def job() -> None: ...

    sync: dict[str, Callable[[], object]] = {
        "by name": lambda: app.enqueue("bench.job", {}),
        "task": job.enqueue,
    }
    calls: dict[str, Callable[[], Any]] = {
        "by name": lambda: app.enqueue_async("bench.job", {}),
        "task": job.enqueue_async,
    }
    spent: dict[str, list[float]] = {}

    async def run() -> None:
        for name, call in sync.items():
            call()  # warm up: pools open, statements prepared
            await calls[name]()
        for _ in range(max(1, count // SIDE_BLOCK)):
            for name, call in sync.items():
                started = time.process_time()
                for _ in range(SIDE_BLOCK):
                    call()
                spent.setdefault(f"sync {name}", []).append(time.process_time() - started)
                started = time.process_time()
                for _ in range(SIDE_BLOCK):
                    await calls[name]()
                spent.setdefault(f"async {name}", []).append(time.process_time() - started)
        await app.aclose()

    asyncio.run(run())
    return {key: statistics.median(v) / SIDE_BLOCK * 1e6 for key, v in spent.items()}


#: How many calls ``--kinds calls`` counts (after a warm-up).
COUNTED_CALLS = 50


def call_counts(dsn: str) -> dict[str, tuple[float, float]]:
    """Per call of ``--kinds side``, the Python function calls of one single enqueue: all of
    them, and those of pgqueue's own code, psycopg_pool's and logging's."""
    import asyncio

    from pgqueue import PgQueue

    app = PgQueue(dsn, pool_size=1)

    @app.task(name="bench.job")
    def job() -> None: ...

    calls: dict[str, Callable[[], Any]] = {
        "sync by name": lambda: app.enqueue("bench.job", {}),
        "sync task": job.enqueue,
        "async by name": lambda: app.enqueue_async("bench.job", {}),
        "async task": job.enqueue_async,
    }
    counted: dict[str, tuple[float, float]] = {}
    ran = [0, 0]

    def profile(frame: Any, event: str, _: Any) -> None:
        if event == "call":
            ran[0] += 1
            where = frame.f_code.co_filename
            if "pgqueue" in where or "psycopg_pool" in where or "logging" in where:
                ran[1] += 1

    async def run() -> None:
        for name, call in calls.items():
            is_async = name.startswith("async")
            for _ in range(5):  # warm up: pools open, statements prepared
                await call() if is_async else call()
            ran[:] = [0, 0]
            sys.setprofile(profile)
            try:
                for _ in range(COUNTED_CALLS):
                    await call() if is_async else call()
            finally:
                sys.setprofile(None)
            counted[name] = (ran[0] / COUNTED_CALLS, ran[1] / COUNTED_CALLS)
        await app.aclose()

    asyncio.run(run())
    return counted


def lone_call(dsn: str, count: int) -> None:
    """One producer, group commit on and off call by call: median call (ms) of each."""
    import timeit

    from pgqueue import PgQueue
    from pgqueue.client.commit_group import Group, ThreadCall
    from pgqueue.rules.job_specs import JobSpec

    clients = {on: PgQueue(dsn, pool_size=1, group_commit=on) for on in (True, False)}
    calls: dict[bool, list[float]] = {True: [], False: []}
    for n in range(count + 20):
        for on in (n % 2 == 0, n % 2 == 1):
            started = time.perf_counter()
            clients[on].enqueue("bench.job", {}, allow_unknown=True)
            if n >= 20:  # after a warm-up
                calls[on].append(time.perf_counter() - started)
    for client in clients.values():
        client.close()
    median_on, median_off = (statistics.median(calls[flag]) * 1e3 for flag in (True, False))
    spec = JobSpec("bench.job", "{}", "default", 0, 5)
    group = Group(threading.Lock(), threading.Event())

    def bookkeeping() -> None:
        call = ThreadCall(spec)
        group.join(call)
        group.gather()
        group.gathered(call)
        group.next()

    cost = min(timeit.repeat(bookkeeping, number=2000, repeat=5)) / 2000 * 1e6
    print(
        f"one producer, call by call: group commit on {median_on:.2f} ms, off {median_off:.2f} ms"
        f" (median of {count} each; on/off {median_on / median_off:.2f}); the group's"
        " bookkeeping per lone "
        f"call {cost:.1f} us of CPU"
    )


def main(argv: list[str] | None = None) -> dict[tuple[str, int], list[float]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dsn", help="an existing server (default: a new embedded one)")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--producers", default="1,8")
    p.add_argument("--tree", type=Path, action="append", default=[], help="another checkout")
    p.add_argument(
        "--kinds",
        default="sync",
        help="library calls to measure: sync,async,task,task_async,keyed,group,lone,side"
        " (comma-separated)",
    )
    p.add_argument(
        "--commit-flush",
        choices=("on", "off"),
        default="on",
        help="off: the producers' commits do not wait for the disk (synchronous_commit = off)",
    )
    p.add_argument("--measure", help=argparse.SUPPRESS)  # a child process: one figure
    args = p.parse_args(argv)
    if args.measure:
        dsn = args.dsn
        if args.commit_flush == "off":
            dsn = make_conninfo(dsn, options="-c synchronous_commit=off")
        if args.measure == "side":
            print(json.dumps(side_by_side(dsn, args.count)))
        elif args.measure == "calls":
            print(json.dumps(call_counts(dsn)))
        else:
            print(json.dumps(measure(args.measure, dsn, int(args.producers), args.count)))
        return {}

    from benchmarks.common import fresh_database, machine, server

    trees = {"this": ROOT, **{str(t): t.resolve() for t in args.tree}}
    variants = [("raw", ROOT), ("jobs INSERT", ROOT)]
    for kind in args.kinds.split(","):
        if kind in ("lone", "side", "calls"):  # measured apart
            continue
        if kind == "group":  # this checkout's option, on and off
            variants += [(f"group {side} {state}", ROOT) for side in ("threads", "tasks")
                         for state in ("on", "off")]  # fmt: skip
            continue
        label = {
            "sync": "PgQueue.enqueue",
            "async": "PgQueue.enqueue_async",
            "task": "task.enqueue",
            "task_async": "task.enqueue_async",
        }.get(kind)
        label = label or "PgQueue.enqueue keyed"
        variants += [(f"{label} {name}", tree) for name, tree in trees.items()]
    producer_counts = [int(n) for n in args.producers.split(",")]
    lone = "lone" in args.kinds.split(",")
    side = "side" in args.kinds.split(",")
    sides: dict[str, list[dict[str, float]]] = {}
    with server(args.dsn) as admin:
        dsn = fresh_database(admin, "pgqueue_enqueue_single")
        # Another checkout gets a database of its own, migrated by its own revisions (a client
        # refuses a schema newer than it knows).
        dsns = {ROOT: dsn}
        for number, tree in enumerate(t for t in trees.values() if t != ROOT):
            dsns[tree] = fresh_database(admin, f"pgqueue_enqueue_single_{number}", migrated=False)
            upgrade = f"from pgqueue.db import migrate; migrate.upgrade({dsns[tree]!r})"
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run([sys.executable, "-c", upgrade], env=env, check=True, cwd=tree)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(RAW_DDL)
            durable = [
                conn.execute(f"SHOW {s}").fetchone() for s in ("fsync", "synchronous_commit")
            ]
        print(machine(dsn), "| fsync, synchronous_commit:", [row[0] for row in durable if row])
        figures: dict[tuple[str, int], list[float]] = {}
        cpu: dict[tuple[str, int], list[float]] = {}
        if lone:
            lone_call(dsn, args.count)
        if "calls" in args.kinds.split(","):
            _print_call_counts({name: _counted(tree, dsns[tree]) for name, tree in trees.items()})
        for round_ in range(args.rounds):
            for producers in producer_counts:
                for variant, tree in variants:
                    env = {**os.environ, "PYTHONPATH": str(tree)}
                    command = [
                        sys.executable, str(Path(__file__).resolve()), "--measure", variant,
                        "--dsn", dsns[tree], "--producers", str(producers),
                        "--count", str(args.count), "--commit-flush", args.commit_flush,
                    ]  # fmt: skip
                    out = subprocess.run(command, check=False, env=env, capture_output=True)
                    if out.returncode:
                        sys.exit(f"{variant}: {out.stderr.decode().strip()}")
                    value, cpu_us = json.loads(out.stdout.decode().strip().splitlines()[-1])
                    figures.setdefault((variant, producers), []).append(value)
                    cpu.setdefault((variant, producers), []).append(cpu_us)
                    with psycopg.connect(dsns[tree], autocommit=True) as conn:
                        conn.execute("TRUNCATE pgqueue.jobs")
                        if tree == ROOT:
                            conn.execute("TRUNCATE raw_jobs")
            if side:
                for name, tree in trees.items():
                    sides.setdefault(name, []).append(_side_round(tree, dsns[tree], args))
            print(f"round {round_ + 1} done", flush=True)
        if sides:
            _print_sides(sides, args.count)
        if not args.rounds:
            return figures
        print(f"\n{args.count} jobs per figure, {args.rounds} rounds: median jobs/s (min-max),")
        print("median of the rounds' ratios to raw (as many producers; one producer), median")
        print("client CPU per job (us)")
        for producers in producer_counts:
            raw = figures["raw", producers]
            single = figures.get(("raw", 1))
            for variant, _ in variants:
                values = figures[variant, producers]
                ratio = statistics.median(v / r for v, r in zip(values, raw, strict=True))
                to_single = (
                    f"  {statistics.median(v / r for v, r in zip(values, single, strict=True)):.2f}"
                    if single
                    else ""
                )
                print(
                    f"  {producers} producer(s)  {variant:<32} {statistics.median(values):>7,.0f}"
                    f" ({min(values):,.0f}-{max(values):,.0f})  {ratio:.2f}{to_single}"
                    f"  {statistics.median(cpu[variant, producers]):>5,.0f} us"
                )
    return figures


def _side_round(tree: Path, dsn: str, args: argparse.Namespace) -> dict[str, float]:
    """One round of ``--kinds side`` in a fresh process with ``tree``'s pgqueue."""
    command = [
        sys.executable, str(Path(__file__).resolve()), "--measure", "side", "--dsn", dsn,
        "--count", str(args.count), "--commit-flush", args.commit_flush,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(command, check=False, env=env, capture_output=True)
    if out.returncode:
        sys.exit(f"side: {out.stderr.decode().strip()}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueue.jobs")
    figures: dict[str, float] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return figures


def _counted(tree: Path, dsn: str) -> dict[str, list[float]]:
    """``--kinds calls`` in a fresh process with ``tree``'s pgqueue."""
    command = [sys.executable, str(Path(__file__).resolve()), "--measure", "calls", "--dsn", dsn]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(command, check=False, env=env, capture_output=True)
    if out.returncode:
        sys.exit(f"calls: {out.stderr.decode().strip()}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueue.jobs")
    counts: dict[str, list[float]] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return counts


def _print_call_counts(trees: dict[str, dict[str, list[float]]]) -> None:
    print(
        "\nPython function calls per single enqueue (sys.setprofile): all of them / those of"
        " pgqueue, psycopg_pool and logging"
    )
    for name, counts in trees.items():
        cells = "  ".join(f"{call} {n:5.1f} / {own:4.1f}" for call, (n, own) in counts.items())
        print(f"  {name:<28} {cells}")


def _print_sides(sides: dict[str, list[dict[str, float]]], count: int) -> None:
    print(
        f"\nOne process, sync and async interleaved ({count} calls of each per round, blocks of"
        f" {SIDE_BLOCK}): client CPU per call (us), median of the rounds, and async/sync"
    )
    for name, rounds in sides.items():
        for call in ("by name", "task"):
            sync = statistics.median(r[f"sync {call}"] for r in rounds)
            async_ = statistics.median(r[f"async {call}"] for r in rounds)
            ratios = sorted(r[f"async {call}"] / r[f"sync {call}"] for r in rounds)
            print(
                f"  {name:<28} {call:<8} sync {sync:6.1f}  async {async_:6.1f}"
                f"  async/sync {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
            )


if __name__ == "__main__":
    main()

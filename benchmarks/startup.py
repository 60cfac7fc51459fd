"""Worker start-up: from spawning the worker process to its first job's handler running.

    python -m benchmarks.startup [--dsn DSN] [--rounds 7] [--systems pgqueue,oban,...]
                                 [--baseline DIR]

For each system (``benchmarks.systems``; the peers from their own virtualenvs): one job is
enqueued and committed, the clock is read (``time.time()``), the worker is spawned exactly as
``benchmarks.compare`` runs it (for pgqueue ``pgq work``), and the handler stamps the wall
clock first thing (``protocol.STATS``). The figure is the difference: interpreter start,
imports, connections, schema checks and the first claim, everything a deploy or an autoscaler
waits for. Rounds are interleaved over the systems (machine noise spreads over all of them);
the table gives the median (min-max) and each system over pgqueue.

``--baseline DIR``: also ``pgq work`` as found in another checkout (``git worktree add DIR
REV``), run from that directory, interleaved with the rest: before and after in one run.

Every system starts from bytecode, as installed from a wheel: the peers' packages were compiled
when pip installed them, and the checkouts measured here (``pgqueue/`` and the drivers under
``benchmarks/``) are compiled before the first round. Without that, where
``PYTHONDONTWRITEBYTECODE`` is set (CI), every ``pgq work`` compiled pgqueue from source, some
0.15 s of CPU no installed pgqueue pays.

Also printed: how many modules ``pgq work`` loads before it runs (``pgqueue.cli`` and the
``work`` command made from it, which imports that command's module) and how long that takes
(median of the same rounds, in a fresh interpreter each time).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import fresh_database, machine, server
from benchmarks.compare import Workers, wait_until
from benchmarks.systems import ROOT, System, build

#: The systems whose drivers have a worker (Redis peers would need the private server).
DEFAULT_SYSTEMS = "pgqueue,pgqueuer,procrastinate,oban,chancy"
#: Longest wait for the first job of one round.
TIMEOUT = 60.0
IMPORT_PROBE = (
    "import sys, time; t = time.perf_counter(); import typer, pgqueue.cli; "
    "typer.main.get_command(pgqueue.cli.app).get_command(None, 'work'); "
    "print(len(sys.modules), time.perf_counter() - t)"
)


def first_job(system: System, db: str, tmp: Path) -> tuple[float, float | None]:
    """Seconds from spawning one worker of ``system`` to its handler starting a waiting job,
    and the worker process's CPU time by then (None from a driver that does not record it)."""
    system.reset(db)
    # One job carrying its send time: its handler appends a line to the latency file at once.
    system.call(db, "latency", "--rate", "1", "--seconds", "1")
    latency = Path(tempfile.mkstemp(dir=tmp, prefix=f"{system.key}-startup-")[1])
    spawned = time.time()
    running = Workers(system, db, 1, tmp, latency=latency)
    try:

        def started() -> bool:
            running.check_alive()
            return latency.stat().st_size > 0

        if not wait_until(started, TIMEOUT, every=0.01):
            raise RuntimeError(f"{system.label}: no job started within {TIMEOUT:.0f} s")
    finally:
        stats = running.stop()
    if not stats:
        raise RuntimeError(f"{system.label}: the worker wrote no job stats")
    first = min(stats, key=lambda s: float(s["first"]))
    cpu = first.get("first_cpu")
    return float(first["first"]) - spawned, None if cpu is None else float(cpu)


def compile_checkout(root: Path) -> None:
    """Write the bytecode of ``root``'s pgqueue and benchmark drivers (``__pycache__``, which
    git ignores), as installing a wheel does."""
    compileall.compile_dir(root / "pgqueue", quiet=1)
    # The drivers and the modules they import; not the peers' virtualenvs below benchmarks/.
    compileall.compile_dir(root / "benchmarks", maxlevels=1, quiet=1)


def import_cli(root: Path = ROOT) -> tuple[int, float]:
    """(modules loaded, seconds) of ``pgq work``'s imports (:data:`IMPORT_PROBE`) in a fresh
    interpreter, with the pgqueue of ``root``."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], check=True, capture_output=True, text=True, cwd=root
    ).stdout.split()
    return int(out[0]), float(out[1])


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="server to measure (default: a new embedded one)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds per system (default 7)")
    parser.add_argument("--systems", default=DEFAULT_SYSTEMS, help="comma-separated keys")
    parser.add_argument("--baseline", type=Path, help="another checkout's pgqueue to compare")
    args = parser.parse_args(argv)
    keys = [k.strip() for k in args.systems.split(",") if k.strip()]
    systems = build(keys, concurrency=64)
    roots = {"": ROOT}
    if args.baseline:
        before = dataclasses.replace(
            build(["pgqueue"], concurrency=64)[0],
            key="pgqueue_baseline",
            label="pgqueue (baseline)",
            root=args.baseline.resolve(),
        )
        systems.insert(1, before)
        roots["baseline "] = before.root
    figures: dict[str, list[float]] = {s.key: [] for s in systems}
    cpu: dict[str, list[float]] = {s.key: [] for s in systems}
    imports: dict[str, list[tuple[int, float]]] = {name: [] for name in roots}
    for root in {*roots.values(), ROOT}:
        compile_checkout(root)
    with contextlib.ExitStack() as stack:
        admin = stack.enter_context(server(args.dsn))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        databases = {}
        for system in systems:
            databases[system.key] = fresh_database(admin, f"startup_{system.key}", migrated=False)
            system.setup(databases[system.key])
        print(f"machine: {machine(admin)}", flush=True)
        for round_ in range(args.rounds):
            for system in systems:
                seconds, used = first_job(system, databases[system.key], tmp)
                figures[system.key].append(seconds)
                if used is not None:
                    cpu[system.key].append(used)
                cpu_ms = "" if used is None else f", CPU {used * 1000:4.0f} ms"
                print(
                    f"  round {round_ + 1} {system.label:<14} {seconds * 1000:7.0f} ms{cpu_ms}",
                    flush=True,
                )
            for name, root in roots.items():
                imports[name].append(import_cli(root))
    print()
    print(report(systems, figures, imports, args.rounds, cpu))
    return figures


def report(
    systems: list[System],
    figures: dict[str, list[float]],
    imports: dict[str, list[tuple[int, float]]],
    rounds: int,
    cpu: dict[str, list[float]] | None = None,
) -> str:
    base = statistics.median(figures["pgqueue"]) if figures.get("pgqueue") else None
    cpu = cpu or {}
    lines = [
        f"spawn -> first job started, median of {rounds} interleaved rounds (min-max); CPU: the "
        "worker process's CPU time by then (blank: its driver does not record it)",
        "",
        "| system | seconds | over pgqueue | CPU (s) |",
        "|---|---|---|---|",
    ]
    for system in systems:
        values = figures[system.key]
        median = statistics.median(values)
        ratio = f"{median / base:.2f}x" if base else ""
        used = cpu.get(system.key)
        cpu_cell = (
            f"{statistics.median(used):.3f} ({min(used):.3f}-{max(used):.3f})" if used else ""
        )
        lines.append(
            f"| {system.label} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) | {ratio} "
            f"| {cpu_cell} |"
        )
    lines.append("")
    for name, probes in imports.items():
        modules = statistics.median(m for m, _ in probes)
        seconds = statistics.median(s for _, s in probes)
        lines.append(f"{name}`pgq work` imports: {modules:.0f} modules, {seconds:.2f} s (median)")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

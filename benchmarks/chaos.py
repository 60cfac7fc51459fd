"""The fault-injection scenarios at full size, and the figures table for docs/reliability.md.

    python -m benchmarks.chaos                    # every scenario, full size
    python -m benchmarks.chaos --only sigkill,burst --size ci

Each scenario runs against a private embedded PostgreSQL of its own (initialised for it, stock
settings, fsync on: the restart scenario crashes it for real) with real ``pgq work`` processes.
The harness and the scenarios live in ``tests/chaos/`` (``pytest -m chaos`` runs them small).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import machine
from pgqueue.db import embedded
from tests.chaos.harness import Env, Report, format_table
from tests.chaos.scenarios import SCENARIOS, poison_pill
from tests.conftest import OwnServer


def run_one(name: str, size: str, base: Path, about: list[str]) -> list[Report]:
    server = OwnServer(base / name)
    if not about:
        about.append(machine(server.dsn))
    env = Env(server.dsn, base / name / "run", restart=lambda: server.restart("immediate"))
    try:
        reports = [SCENARIOS[name](env, size)]
        if name == "poison":
            # The same stream without the poison pill, on a fresh server, for comparison.
            control = OwnServer(base / "control")
            try:
                reports.append(
                    poison_pill(Env(control.dsn, base / "control" / "run"), size, with_poison=False)
                )
            finally:
                embedded.stop(control.data)
        return reports
    finally:
        if embedded.is_running(server.data):
            embedded.stop(server.data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["ci", "full"], default="full")
    parser.add_argument("--only", help=f"comma-separated: {','.join(SCENARIOS)}")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(SCENARIOS)
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    reports: list[Report] = []
    failed: list[str] = []
    about: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pgqueue-chaos-") as tmp:
        for name in names:
            started = time.monotonic()
            print(f"running {name} ({args.size})...", file=sys.stderr, flush=True)
            for report in run_one(name, args.size, Path(tmp), about):
                expect_dead = 1 if report.scenario.startswith("7. poison") else 0
                try:
                    report.check(expect_dead=expect_dead)
                except AssertionError as exc:
                    failed.append(str(exc))
                reports.append(report)
                print(f"  {report}", file=sys.stderr, flush=True)
            print(f"  took {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    print(f"machine: {about[0] if about else 'unknown'}\n")
    print(format_table(reports))
    print()
    if any(report.tx_jobs for report in reports):
        print("Effects written in the completion's transaction (ctx.transaction()), beside the")
        print("plain ledger, by the same jobs:\n")
        print(format_table(reports, tx=True))
        print()
    if any(report.durable_jobs for report in reports):
        print("Durable jobs: step functions executed, re-run, and run after their checkpoint")
        print("had committed; the transactional step's effects; event waits and sleeps:\n")
        print(format_table(reports, durable=True))
        print()
    for report in reports:
        if report.notes:
            notes = ", ".join(f"{key}: {value}" for key, value in report.notes.items())
            print(f"- {report.scenario}: {notes}")
    if failed:
        print("\nCHECK FAILED:\n" + "\n".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()

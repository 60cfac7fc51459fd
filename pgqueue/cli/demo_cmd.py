"""``pgq demo``: its options; the demo itself (its tasks, workers, live view) is
:mod:`pgqueue.cli.demo`, imported when it runs."""

from __future__ import annotations

from typing import Annotated

import typer

from pgqueue.cli.common import DsnOption, example, friendly_errors, in_range

commands = typer.Typer()


@commands.command("demo", epilog=example("pgq demo --jobs 10000 --workers 4"))
def demo(
    jobs: Annotated[
        int, typer.Option(callback=in_range(1, 10_000_000), help="How many jobs to enqueue.")
    ] = 3000,
    workers: Annotated[
        int, typer.Option(callback=in_range(1, 64), help="Worker processes to start.")
    ] = 2,
    concurrency: Annotated[
        int, typer.Option(callback=in_range(1, 1000), help="Slots per worker.")
    ] = 16,
    dsn: DsnOption = None,
) -> None:
    """Run the demo: enqueue jobs, run real workers with a live view, print a summary."""
    from pgqueue.cli import demo as demo_module

    with friendly_errors():
        demo_module.run(jobs=jobs, workers=workers, concurrency=concurrency, dsn=dsn)

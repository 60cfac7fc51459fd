"""``pgq work``'s options are made from WorkerSettings (pgqueue/cli/work_options.py): a setting
and its option are declared once, in the settings. These tests fail if the two drift: a setting
nobody decided about, an option whose default is not the setting's, a value that lands in the
wrong setting."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import typer.main

from pgqueue.cli.app import app
from pgqueue.cli.work_options import settings_from_options
from pgqueue.worker import WorkerSettings

# Settings that are no option of their own: set by --concurrency MIN:MAX, fixed, from APP.
NOT_OPTIONS = {"min_concurrency", "scheduler_interval", "app_spec"}
# pgq work's options that are not worker settings.
OWN_OPTIONS = {"app", "metrics_port", "metrics_host", "dsn", "read_dsn", "log_level",
               "log_format", "log_config"}  # fmt: skip
# The --NAME/--no-NAME options that switch a setting off (None).
SWITCHES = {"reaper", "pruner", "maintenance"}


def parse(*argv: str) -> dict[str, Any]:
    """What typer passes to ``work`` for this command line."""
    command = typer.main.get_command(app).commands["work"]  # type: ignore[attr-defined]
    with command.make_context("work", ["myapp:pgq", *argv]) as ctx:
        return dict(ctx.params)


def settings(*argv: str) -> WorkerSettings:
    options = {k: v for k, v in parse(*argv).items() if k not in OWN_OPTIONS}
    return settings_from_options(options, app_spec="myapp:pgq")


def test_every_setting_is_an_option_or_said_not_to_be() -> None:
    with_flag = {f.name for f in fields(WorkerSettings) if "flag" in f.metadata}
    assert {f.name for f in fields(WorkerSettings)} - with_flag == NOT_OPTIONS
    assert set(parse()) == with_flag | OWN_OPTIONS | SWITCHES


def test_the_defaults_are_the_settings_defaults() -> None:
    assert settings() == WorkerSettings(app_spec="myapp:pgq")


def test_each_option_sets_its_setting() -> None:
    assert settings(
        *("--queue", "a, b", "--concurrency", "2:8", "--scale-cooldown", "1m"),
        *("--prefetch", "0", "--pool", "process", "--max-jobs-per-child", "5"),
        *("--max-memory-per-child", "300", "--no-scheduler", "--burst", "--lease", "10s"),
        *("--shutdown-grace", "1s", "--poll-interval", "250ms", "--no-reaper"),
        *("--prune-interval", "2m", "--no-listen", "--listen-dsn", "postgresql:///x"),
        *("--no-prepare", "--no-maintenance"),
    ) == WorkerSettings(
        queues=["a", "b"],
        concurrency=8,
        min_concurrency=2,
        scale_cooldown=60.0,
        prefetch=0,
        pool="process",
        max_jobs_per_child=5,
        max_memory_per_child=300.0,
        scheduler=False,
        burst=True,
        lease=10.0,
        shutdown_grace=1.0,
        poll_interval=0.25,
        reaper_interval=None,
        prune_interval=120.0,
        maintenance_interval=None,
        listen=False,
        listen_dsn="postgresql:///x",
        prepare=False,
        app_spec="myapp:pgq",
    )
    assert settings("--reaper-interval", "3s", "--no-pruner") == WorkerSettings(
        reaper_interval=3.0, prune_interval=None, app_spec="myapp:pgq"
    )
    assert settings("--maintenance-interval", "5m").maintenance_interval == 300.0
    assert settings("--concurrency", "4", "--prefetch", "auto").min_concurrency is None


def test_the_help_is_the_settings() -> None:
    command = typer.main.get_command(app).commands["work"]  # type: ignore[attr-defined]
    helps = {p.name: p.help for p in command.params}
    for setting in fields(WorkerSettings):
        if "flag" in setting.metadata:
            assert helps[setting.name] == setting.metadata["flag"].help

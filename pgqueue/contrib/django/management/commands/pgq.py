"""``manage.py pgq ...``: the whole ``pgq`` command line inside a Django project, on the project's
database: every command connects to ``DATABASES["default"]`` (``--database ALIAS`` picks
another, ``--dsn`` still wins over both), and Django is set up before anything imports the
tasks, e.g. ``manage.py pgq status``, ``manage.py pgq work myproject.tasks:pgq``."""

from __future__ import annotations

import os
from argparse import REMAINDER, ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from pgqueue.contrib.django import dsn
from pgqueue.errors import ConfigurationError
from pgqueue.rules import config

DATABASE_OPTION = "--database"


class Command(BaseCommand):
    help = (
        "Run a pgq command (pgq --help lists them) on the project's database, e.g. "
        "`pgq status`, `pgq --database other dlq list`, `pgq work myproject.tasks:pgq`."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            DATABASE_OPTION,
            default=None,
            help="The DATABASES alias the command uses (default: default); --dsn wins over it.",
        )
        parser.add_argument("args", nargs=REMAINDER, help="the pgq command and its options")

    def handle(self, *args: str, **options: Any) -> None:
        from pgqueue.cli.app import app

        alias, rest = take_database(list(args), options.get("database"))
        if _connects(rest) and not _gives_dsn(rest) and (alias is not None or not _is_work(rest)):
            # Every command reads the DSN from PGQUEUE_DSN when --dsn is not given: pointing it
            # at DATABASES[alias] serves them all (and the worker's process-pool children)
            # without repeating the CLI. `work` without --database keeps its app's own queue
            # (`queue(alias)` already names a DATABASES entry).
            try:
                os.environ[config.DSN_ENV_VARS[0]] = dsn(alias or "default")
            except ConfigurationError as exc:
                raise CommandError(str(exc)) from None
        # typer exits with the command's status; manage.py passes it on.
        app(args=rest, prog_name="manage.py pgq")


def take_database(args: list[str], given: str | None) -> tuple[str | None, list[str]]:
    """The ``--database`` alias (given before the pgq command, or anywhere after it: pgq has no
    option of that name) and the pgq arguments without it."""
    alias, rest = given, []
    it = iter(args)
    for arg in it:
        if arg == "--":
            rest.extend([arg, *it])
            break
        if arg == DATABASE_OPTION:
            alias = next(it, None)
            if alias is None:
                raise CommandError(f"{DATABASE_OPTION} needs a DATABASES alias")
        elif arg.startswith(DATABASE_OPTION + "="):
            alias = arg.partition("=")[2]
        else:
            rest.append(arg)
    return alias, rest


def _connects(args: list[str]) -> bool:
    """Not only help or the version (those need no database, even a project without one)."""
    return bool(args) and not {"--help", "--version"} & set(args)


def _gives_dsn(args: list[str]) -> bool:
    return any(a == "--dsn" or a.startswith("--dsn=") for a in args)


def _is_work(args: list[str]) -> bool:
    return next((a for a in args if not a.startswith("-")), None) == "work"

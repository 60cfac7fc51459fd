"""``manage.py pgq ...``: the ``pgq`` command line inside a Django project (Django is set up
before anything imports the tasks), e.g. ``manage.py pgq work myproject.tasks:pgq``."""

from __future__ import annotations

from argparse import REMAINDER, ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run a pgq command (pgq --help lists them), e.g. `pgq work myproject.tasks:pgq`."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("args", nargs=REMAINDER, help="the pgq command and its options")

    def handle(self, *args: str, **options: Any) -> None:
        from pgqueue.cli.app import app

        # typer exits with the command's status; manage.py passes it on.
        app(args=list(args), prog_name="manage.py pgq")

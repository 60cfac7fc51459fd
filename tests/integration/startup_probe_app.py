"""A task module for the start-up test, importable by a real ``pgq work`` process:

    pgq work tests.integration.startup_probe_app:pgq

Its one task writes the names of every module the worker process has loaded (``sys.modules``)
to the file it is given, one a line, so a test can see what ``pgq work`` imported on its way to
running a job. It imports nothing beyond pgqueue itself, so whatever it finds is the worker's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pgqueue import PgQueue

pgq = PgQueue()


@pgq.task(name="startup.modules")
def dump_modules(path: str) -> None:
    Path(path).write_text("\n".join(sorted(sys.modules)) + "\n")

"""A real ``manage.py pgq work`` process on the test database, for test cases whose tasks must
run (TransactionTestCase: the worker sees only committed jobs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ParamSpec, TypeVar

from django.db import connection
from django.tasks import TaskResult
from psycopg.conninfo import make_conninfo

_P = ParamSpec("_P")
_R = TypeVar("_R")

MANAGE = Path(__file__).resolve().parents[1] / "manage.py"


def start_worker(*options: str) -> subprocess.Popen[str]:
    """``manage.py pgq work`` (no APP: the project's tasks, found by discovery)."""
    env = {
        **os.environ,
        "PGQ_DJANGO_DSN": make_conninfo(
            os.environ["PGQ_DJANGO_DSN"], dbname=connection.settings_dict["NAME"]
        ),
    }
    return subprocess.Popen(
        # One job at a time, none claimed ahead: the order of claims is the order of runs.
        [
            sys.executable,
            str(MANAGE),
            "pgq",
            "work",
            "--concurrency",
            "1",
            "--prefetch",
            "0",
            *options,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_worker(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    try:
        out, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return out


def wait_finished(result: TaskResult[_P, _R], timeout: float = 30) -> TaskResult[_P, _R]:
    """Refresh ``result`` until its task finished (or fail after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not result.is_finished:
        if time.monotonic() > deadline:
            raise AssertionError(f"task {result.id} not finished after {timeout}s: {result}")
        time.sleep(0.05)
        result.refresh()
    return result

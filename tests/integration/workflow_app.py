"""Tasks for result and workflow tests, importable by real `pgq work` processes:

    pgq work tests.integration.workflow_app:pgq

Handlers write to the effects ledger (see worker_app) so tests can check order and counts.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pgqueue import Fail, PgQueue, current_job
from tests.integration.worker_app import record

pgq = PgQueue()


@pgq.task(name="wf.add", result_ttl=3600)
def add(x: int, y: int = 0) -> int:
    record("end", note=f"{x}+{y}")
    return x + y


@pgq.task(name="wf.async_add", result_ttl=3600)
async def async_add(x: int, y: int = 0) -> int:
    return x + y


@pgq.task(name="wf.plain")
def plain(x: int) -> int:
    """Keeps no result unless the call asks for one."""
    return x * 2


@pgq.task(name="wf.collect")
def collect(values: list[int]) -> int:
    record("end", note=json.dumps(values))
    return sum(values)


@pgq.task(name="wf.step")
def step(label: str, seconds: float = 0.0) -> str:
    """Records its start and end (note = label) around a sleep; returns its label."""
    record("start", note=label)
    if seconds:
        time.sleep(seconds)
    record("end", note=label)
    return label


@pgq.task(name="wf.fail", max_attempts=1)
def fail(label: str) -> None:
    record("start", note=label)
    raise Fail(f"{label} cannot work")


@pgq.task(name="wf.alert")
def alert(info: dict[str, Any], channel: str = "ops") -> str:
    record("end", note=json.dumps(info, sort_keys=True))
    return f"{channel}:{info['job_id']}"


@pgq.task(name="wf.unstorable", result_ttl=3600)
def unstorable() -> object:
    return object()


@pgq.task(name="wf.attempt", max_attempts=3)
def attempt(label: str, seconds: float) -> str:
    """Sleeps without cooperating (a SIGKILL mid-sleep leaves it running in nobody's hands)."""
    record("start", note=label)
    time.sleep(seconds)
    record("end", note=f"{label}:{current_job().attempt}")
    return label

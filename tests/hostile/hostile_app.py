"""Tasks for the hostile-input tests: they record exactly what they were called with."""

from __future__ import annotations

import json

from pgqueue import PgQueue
from tests.integration.worker_app import record

pgq = PgQueue()


@pgq.task(name="echo")
def echo(**kwargs: object) -> None:
    record("end", note=json.dumps(kwargs, ensure_ascii=False))


@pgq.task(name="echo_one", max_attempts=3)
def echo_one(value: object) -> None:
    record("end", note=json.dumps(value, ensure_ascii=False))


@pgq.task(name="fails", max_attempts=1)
def fails() -> None:
    record("start")
    raise RuntimeError("fails on purpose")

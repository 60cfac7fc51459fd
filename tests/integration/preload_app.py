"""A WSGI application served by ``gunicorn --preload`` (tests/integration/test_gunicorn_preload.py):
its ``PgQueue`` is made, and used, at import, in gunicorn's master process, before the workers
are forked. Each request enqueues one job and answers with what served it: the worker's pid and
the backend its client's connection talks to."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from pgqueue import PgQueue

pgq = PgQueue(os.environ["PGQUEUE_DSN"])


@pgq.task(name="web.signup", queue="web")
def signup(n: int) -> None:
    """Never run here: the test counts the rows."""


def _backend() -> int:
    with pgq.connection() as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(row[0])


# At import, in the master: the client's pool is open before the fork.
signup.enqueue(n=0)
MASTER_BACKEND = _backend()


def application(
    environ: dict[str, Any], start_response: Callable[[str, list[tuple[str, str]]], Any]
) -> Iterable[bytes]:
    n = int(environ.get("QUERY_STRING") or 0)
    job = signup.enqueue(n=n)
    body = json.dumps(
        {"job": int(job), "pid": os.getpid(), "backend": _backend(), "master": MASTER_BACKEND}
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]

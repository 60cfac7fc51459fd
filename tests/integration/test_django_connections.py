"""A Django connection the server closed costs a job nothing: the worker runs Django's
``close_old_connections()`` before and after each job on the thread (or process-pool child)
that runs it, as Django does around each request. Real ``manage.py pgq work`` processes; the
server process behind the handler's Django connection is terminated between two jobs."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.helpers import scalar, wait_for
from tests.integration.django_project import (
    manage,
    ok,
    project_env,
    start_worker,
    stop,
    write_project,
)

CREATE_ORDERS = """
from orders.models import Order
print(" ".join(str(Order.objects.create(email=f"{i}@example.com").id) for i in range(2)))
"""


def _finished(dsn: str, job: int) -> tuple[int, int] | None:
    """(attempts, the backend pid the handler's Django connection had) once the job succeeded;
    a job that failed for good fails the test with its errors."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT attempts, result FROM pgqueue.job_history WHERE id = %s", (job,)
        ).fetchone()
        dead = conn.execute(
            "SELECT errors FROM pgqueue.dead_letters WHERE id = %s", (job,)
        ).fetchone()
    assert dead is None, f"job {job} was dead-lettered: {[e['message'] for e in dead[0]]}"
    return None if row is None else (int(row[0]), int(row[1]))


@pytest.mark.parametrize(
    ("pool", "persistent"),
    [("thread", False), ("thread", True), ("process", False), ("process", True)],
    ids=["thread", "thread-persistent", "process", "process-persistent"],
)
def test_a_terminated_connection_costs_no_attempt(
    tmp_path: Path, fresh_db: str, pool: str, persistent: bool
) -> None:
    project = write_project(tmp_path / "project")
    # Persistent connections (CONN_MAX_AGE=None) with CONN_HEALTH_CHECKS, or Django's default
    # (closed after each job).
    env = project_env(fresh_db, **({"PROJECT_PERSISTENT": "1"} if persistent else {}))
    ok(manage(project, env, "migrate", "--no-input"))
    created = ok(manage(project, env, "shell", "-c", CREATE_ORDERS)).strip().splitlines()[-1]
    first_order, second_order = created.split()

    def confirm(order: str) -> int:
        # Through the task (the CLI's enqueue knows nothing of its result_ttl).
        script = f"from orders.tasks import confirm; print(confirm.enqueue({order}))"
        return int(ok(manage(project, env, "shell", "-c", script)).strip().splitlines()[-1])

    # One job at a time, on one thread (or one child): the second job runs where the first ran.
    worker = start_worker(project, env, "--queue", "orders", "--concurrency", "1", "--pool", pool)
    try:
        first = confirm(first_order)
        attempts, backend = wait_for(lambda: _finished(fresh_db, first), timeout=60)
        assert attempts == 1
        # The server ends the connection the handler used (a restart, an idle timeout, a
        # failover would), between two jobs.
        scalar(fresh_db, "SELECT pg_terminate_backend(%s)", (backend,))
        second = confirm(second_order)
        attempts, _ = wait_for(lambda: _finished(fresh_db, second), timeout=60)
    finally:
        log = stop(worker)
    assert attempts == 1, log
    assert "terminating connection" not in log
    assert scalar(fresh_db, "SELECT count(*) FROM orders_order WHERE confirmed") == 2

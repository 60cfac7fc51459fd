"""Worker defaults that do what the app says: without --queue a worker serves the queues its
tasks declare, says what it serves, and warns about declared tasks it will not run; a task
defined in __main__ (which no worker could ever find) is refused when declared."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.helpers import PGQ, scalar
from tests.integration import queues_app


def work(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PGQ, "work", "tests.integration.queues_app:pgq", "--burst", "--poll-interval", "0.2",
         *args],
        env={**os.environ, "PGQUEUE_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


def test_without_queue_the_worker_serves_every_declared_queue(pgq, dsn):
    # (Passing the Task applies its declared queue, as the app's own enqueue would.)
    jobs = [pgq.enqueue(queues_app.welcome, {"to": "a"}),
            pgq.enqueue(queues_app.report, {"month": "2026-11"}),
            pgq.enqueue(queues_app.plain)]  # fmt: skip
    done = work(dsn)
    assert done.returncode == 0, done.stderr
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    assert [pgq.result(job, timeout=5) for job in jobs] == ["welcome a", "report 2026-11", "plain"]
    for line in ("serving queue=emails tasks=q.welcome", "serving queue=reports tasks=q.report",
                 "serving queue=default tasks=q.plain"):  # fmt: skip
        assert line in done.stderr
    assert "will not run here" not in done.stderr


def test_a_worker_warns_about_declared_tasks_it_does_not_serve(pgq, dsn):
    pgq.enqueue(queues_app.welcome, {"to": "a"})
    done = work(dsn, "--queue", "default")
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if "will not run here" in line]
    assert len(warning) == 1
    assert "q.welcome (queue emails)" in warning[0]
    assert "q.report (queue reports)" in warning[0]
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs WHERE queue = 'emails'") == 1


def test_a_task_defined_in_main_is_refused_with_the_fix(tmp_path):
    script = tmp_path / "tasks.py"
    script.write_text(
        textwrap.dedent(
            """
            from pgqueue import PgQueue

            pgq = PgQueue("host=/nonexistent")

            @pgq.task(name="tasks.named")  # a name of its own: fine
            def named() -> None: ...

            @pgq.task
            def add(a: int, b: int) -> int:
                return a + b
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "task 'add' is defined in __main__" in done.stderr
    assert '@pgq.task(name="myapp.add")' in done.stderr

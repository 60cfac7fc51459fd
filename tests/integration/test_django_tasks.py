"""pgqueue in a Django 6 project, run as a user runs it: a two-app project
(``tests/integration/django_tasks``) on a real PostgreSQL, through ``manage.py``.

* Django's task framework on ``PgQueueBackend``: the project's own contract tests
  (``django_tasks/contract/*_tests.py``, the behaviours of Django's backend tests) run under
  Django's test runner, ``manage.py test``, with a real ``manage.py pgq work`` for the tasks.
* One queue per project: the apps' ``queue()`` is one object, and ``manage.py pgq work`` (or
  ``pgq work`` with ``DJANGO_SETTINGS_MODULE``) without an APP runs every app's tasks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import scalar

ROOT = Path(__file__).resolve().parents[2]
MANAGE = [sys.executable, str(ROOT / "tests" / "integration" / "django_tasks" / "manage.py")]
PGQ = [sys.executable, "-m", "pgqueue.cli"]
SETTINGS = "tests.integration.django_tasks.settings"


def project_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUE_", "DJANGO_"))}
    return {**env, "PGQ_DJANGO_DSN": dsn, "PYTHONPATH": str(ROOT), **extra}


def run(
    args: list[str], env: dict[str, str], timeout: float = 170
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def ok(args: list[str], env: dict[str, str], timeout: float = 170) -> str:
    done = run(args, env, timeout)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("module", ["backend_tests", "worker_tests", "durable_tests"])
def test_django_task_backend_contract(fresh_db: str, module: str) -> None:
    """Django's test runner over the backend's contract tests (a test database of its own,
    made by Django's runner from this one's server)."""
    label = f"tests.integration.django_tasks.contract.{module}"
    output = ok([*MANAGE, "test", label, "--noinput", "-v", "2"], project_env(fresh_db), 175)
    assert "\nOK" in output, output
    assert "skipped" not in output, output


ENQUEUE = """
import json
from tests.integration.django_tasks.billing import tasks as billing
from tests.integration.django_tasks.shop import tasks as shop
from tests.integration.django_tasks.shop.models import Order

order = Order.objects.create(email="a@example.com")
shop.send_receipt.enqueue(order.id)
billing.charge.enqueue(order.id)
result = billing.invoice.enqueue(order.id)
print(json.dumps({"same": shop.pgq is billing.pgq, "order": order.id, "result": result.id}))
"""

READ = """
import json
from django.tasks import default_task_backend
from tests.integration.django_tasks.shop.models import Order

order = Order.objects.get(id={order})
result = default_task_backend.get_result("{result}")
print(json.dumps({{"flags": [order.receipt_sent, order.charged, order.invoiced],
                  "status": result.status, "value": result.return_value}}))
"""


def last_json(output: str) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(output.strip().splitlines()[-1])
    return loaded


@pytest.mark.slow
@pytest.mark.parametrize("how", ["manage.py pgq work", "pgq work"])
def test_one_worker_runs_every_apps_tasks(fresh_db: str, how: str) -> None:
    """Two apps' tasks.py each say ``pgq = queue()``; a worker started without an APP runs the
    jobs of both, pgqueue's own tasks and Django's alike."""
    env = project_env(fresh_db)
    ok([*MANAGE, "migrate", "--no-input"], env)
    enqueued = last_json(ok([*MANAGE, "shell", "-c", ENQUEUE], env))
    assert enqueued["same"] is True
    assert scalar(fresh_db, "SELECT count(*) FROM pgqueue.jobs") == 3
    if how == "pgq work":
        work = [*PGQ, "work", "--burst"]
        env = {**env, "DJANGO_SETTINGS_MODULE": SETTINGS}
    else:
        work = [*MANAGE, "pgq", "work", "--burst"]
    log = ok(work, env)
    assert scalar(fresh_db, "SELECT count(*) FROM pgqueue.jobs") == 0, log
    read = last_json(ok([*MANAGE, "shell", "-c", READ.format(**enqueued)], env))
    assert read == {
        "flags": [True, True, True],
        "status": "SUCCESSFUL",
        "value": f"invoiced {enqueued['order']}",
    }
    # The worker named what it serves: both apps' queues, and the TASKS backends' too.
    assert "serving queue=mail" in log and "serving queue=queue-1" in log, log


def test_pgq_work_without_an_app_outside_django_says_what_to_do(dsn: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUE_", "DJANGO_"))}
    done = run([*PGQ, "work", "--dsn", dsn, "--burst"], env, 60)
    assert done.returncode == 2, done
    assert "DJANGO_SETTINGS_MODULE" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_jobs_of_tasks_no_running_worker_runs_are_named(fresh_db: str) -> None:
    """A worker started for one app (an explicit APP) does not run the other app's tasks: it
    says so when it starts, and ``pgq status`` names those tasks until a worker runs them."""
    env = project_env(fresh_db)
    ok([*MANAGE, "migrate", "--no-input"], env)
    ok([*MANAGE, "shell", "-c", ENQUEUE], env)
    shop_only = "tests.integration.django_tasks.shop.tasks:pgq"
    log = ok([*MANAGE, "pgq", "work", shop_only, "--burst", "--queue", "mail,default"], env)
    assert "jobs wait for tasks that no running worker runs" in log, log
    billing = "tests.integration.django_tasks.billing.tasks"
    assert f"{billing}.charge (queue default, 1 jobs)" in log, log
    assert f"{billing}.invoice (queue default, 1 jobs)" in log, log

    wide = {**env, "COLUMNS": "250"}  # one line per task
    status = ok([*PGQ, "status", "--dsn", fresh_db], wide)
    assert f"unserved: {billing}.charge (queue default): 1 job(s) waiting" in status, status
    as_json = json.loads(ok([*PGQ, "status", "--dsn", fresh_db, "--json"], env))
    assert sorted(row["task"] for row in as_json["unserved"]) == [
        f"{billing}.charge",
        f"{billing}.invoice",
    ]

    ok([*MANAGE, "pgq", "work", "--burst"], env)  # the project's worker runs every app's tasks
    status = ok([*PGQ, "status", "--dsn", fresh_db], env)
    assert "unserved" not in status, status


def test_project_mistakes_are_one_line_each(fresh_db: str) -> None:
    """Two apps asking queue() for different options, and a bad PGQUEUE_TASK_MODULES, are
    errors that say what to change (no traceback from pgq work)."""
    env = project_env(fresh_db)
    clash = "from pgqueue.contrib.django import queue; queue(); queue(pool_size=3)"
    done = run([*MANAGE, "shell", "-c", clash], env, 60)
    assert done.returncode != 0
    assert "give its options in one place" in done.stderr, done.stderr

    bad = {**env, "PGQ_TASK_MODULES": json.dumps(["tasks", "not a module"])}
    done = run([*MANAGE, "pgq", "work", "--burst"], bad, 60)
    assert done.returncode == 1, done
    assert "PGQUEUE_TASK_MODULES must be a module name or a list of them" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


@pytest.mark.slow
def test_task_modules_setting(fresh_db: str) -> None:
    """A task in billing/jobs.py is run once PGQUEUE_TASK_MODULES names ``jobs``; until then the
    worker does not import it, and says its jobs wait for a worker."""
    env = project_env(fresh_db)
    ok([*MANAGE, "migrate", "--no-input"], env)
    enqueue = (
        "from tests.integration.django_tasks.billing.jobs import nightly;"
        "open('/dev/stdout', 'w').write('\\n' + nightly.enqueue().id + '\\n')"
    )
    task_id = ok([*MANAGE, "shell", "-c", enqueue], env).strip().splitlines()[-1]
    log = ok([*MANAGE, "pgq", "work", "--burst"], env)
    assert "billing.jobs.nightly (queue default, 1 jobs)" in log, log
    both = {**env, "PGQ_TASK_MODULES": json.dumps(["tasks", "jobs"])}
    ok([*MANAGE, "pgq", "work", "--burst"], both)
    read = (
        "from django.tasks import default_task_backend as b;"
        f"r = b.get_result({task_id!r}); print(r.status, r.return_value)"
    )
    assert ok([*MANAGE, "shell", "-c", read], env).strip().splitlines()[-1] == "SUCCESSFUL ran"

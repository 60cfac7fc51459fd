"""The examples in examples/ run as a user runs them: real frameworks, real processes, real
PostgreSQL (a fresh, empty database each: the examples install pgqueue's schema themselves)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqueue.db import migrate
from tests.helpers import PGQ, scalar

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def django_env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PGQUEUE_", "DJANGO_"))}
    return {**env, "DATABASE_URL": dsn, "PYTHONPATH": str(EXAMPLES / "django")}


POST = """
import json
from django.test import Client
client = Client()
body = json.dumps({"email": "a@example.com"})
ok = client.post("/orders", body, content_type="application/json")
refused = client.post("/orders/failing", body, content_type="application/json")
print(json.dumps({"ok": ok.json(), "refused": refused.status_code}))
"""


def test_django_example(fresh_db):
    project = EXAMPLES / "django"
    env = django_env(fresh_db)
    manage = [sys.executable, "manage.py"]

    # manage.py migrate installs pgqueue's schema (the app's migration depends on it).
    run([*manage, "migrate", "--no-input"], project, env)
    head = migrate.head_revision()
    assert migrate.current_revision(fresh_db) == head
    assert scalar(fresh_db, "SELECT to_regclass('public.shop_order') IS NOT NULL")

    # A view enqueues in its transaction: committed with the order, or gone with it.
    posted = json.loads(run([*manage, "shell", "-c", POST], project, env).strip().splitlines()[-1])
    assert posted["refused"] == 409
    assert scalar(fresh_db, "SELECT count(*) FROM shop_order") == 1
    # Both apps' jobs, pgqueue's API and Django's, in the view's transaction (none refused).
    assert scalar(fresh_db, "SELECT count(*) FROM pgqueue.jobs") == 2
    job = posted["ok"]["job"]
    invoice_task = posted["ok"]["invoice_task"]

    # The admin's read-only models read pgqueue's views.
    stats = run([*manage, "shell", "-c",
                 "from pgqueue.contrib.django.models import QueueStat, DeadLetter;"
                 "print(sorted(QueueStat.objects.values_list('queue', 'ready')),"
                 " DeadLetter.objects.count())"], project, env)  # fmt: skip
    assert stats.strip().splitlines()[-1] == "[('default', 1), ('emails', 1)] 0"

    # One worker, no APP: every installed app's tasks module is imported, and it runs shop's
    # pgqueue task and billing's Django task alike (Django set up before the ORM is used).
    run([*manage, "pgq", "work", "--burst", "--poll-interval", "0.2"], project, env)
    assert scalar(fresh_db, "SELECT confirmed FROM shop_order") is True
    assert scalar(fresh_db, "SELECT result FROM pgqueue.job_history WHERE id = %s", (job,)) == (
        "confirmed a@example.com"
    )
    assert scalar(fresh_db, "SELECT total_cents FROM billing_invoice") == 1250
    read = (
        "from billing.tasks import issue_invoice;"
        f"r = issue_invoice.get_result({invoice_task!r}); print(r.status, r.return_value)"
    )
    invoice_id = scalar(fresh_db, "SELECT id FROM billing_invoice")
    result = run([*manage, "shell", "-c", read], project, env).strip().splitlines()[-1]
    assert result == f"SUCCESSFUL {invoice_id}"

    # Plain `pgq work` with DJANGO_SETTINGS_MODULE does the same, without an APP too.
    run([*manage, "shell", "-c", POST], project, env)
    run([PGQ, "work", "--burst", "--poll-interval", "0.2"], project,
        {**env, "DJANGO_SETTINGS_MODULE": "mysite.settings"})  # fmt: skip
    assert scalar(fresh_db, "SELECT count(*) FROM shop_order WHERE confirmed") == 2
    assert scalar(fresh_db, "SELECT count(*) FROM billing_invoice") == 2

    # A newer pgqueue (here: a schema one revision behind) is upgraded by the next migrate.
    with psycopg.connect(fresh_db) as conn:
        previous = migrate.alembic_script().get_revision(head).down_revision
        conn.execute(migrate.downgrade_sql(str(previous), head, transaction=False))
    assert migrate.current_revision(fresh_db) == previous
    run([*manage, "migrate", "--no-input"], project, env)
    assert migrate.current_revision(fresh_db) == head


def test_django_worker_without_settings_explains_itself(fresh_db):
    """A Django project's tasks imported with unusable settings fail with one clear line."""
    env = {**django_env(fresh_db), "DJANGO_SETTINGS_MODULE": "mysite.no_such_settings"}
    done = subprocess.run(
        [PGQ, "work", "shop.tasks:pgq", "--burst"],
        cwd=EXAMPLES / "django",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "could not set up Django (mysite.no_such_settings)" in done.stderr
    assert "Traceback" not in done.stderr


def as_url(dsn: str, scheme: str = "postgresql") -> str:
    """A keyword DSN as a URL (what app configs hold)."""
    params = conninfo_to_dict(dsn)
    auth = quote(str(params.get("user", "")), safe="")
    if params.get("password"):
        auth += ":" + quote(str(params["password"]), safe="")
    query = urlencode({str(k): str(params[k]) for k in ("host", "port") if k in params})
    return f"{scheme}://{auth}@/{params['dbname']}?{query}"


def _start_worker(app: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PGQ, "work", app, "--poll-interval", "0.2", "--shutdown-grace", "5"],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(worker: subprocess.Popen[str]) -> str:
    worker.terminate()
    _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    return err


def test_fastapi_sqlalchemy_example(dsn, monkeypatch):
    """Sign-ups through the real FastAPI app (its lifespan, its AsyncSession per request), the
    welcome jobs run by pgqueue.testing.drain_async on the app's own event loop (no worker),
    and results awaited by the app."""
    project = EXAMPLES / "fastapi_sqlalchemy"
    url = as_url(dsn, "postgresql+psycopg")  # SQLAlchemy's form: pgqueue takes it too
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.syspath_prepend(str(project))
    from fastapi.testclient import TestClient
    from signups.app import app  # type: ignore[import-not-found]
    from signups.tasks import pgq, send_welcome  # type: ignore[import-not-found]

    from pgqueue.testing import assert_enqueued, drain_async

    with TestClient(app) as client:
        refused = client.post("/signups", json={"email": "b@example.com", "fail": True})
        assert refused.status_code == 409
        signed = client.post("/signups", json={"email": "a@example.com"}).json()
        assert_enqueued(pgq, send_welcome, args={"user_id": signed["user"]}, count=1)
        # On the app's loop: the handler's AsyncSession uses the app's engine.
        summary = client.portal.call(drain_async, pgq)
        assert [run.value for run in summary.succeeded] == ["welcomed a@example.com"]
        assert client.get(f"/jobs/{signed['job']}").json() == {"result": "welcomed a@example.com"}
    assert scalar(dsn, "SELECT count(*) FROM users") == 1  # the refused one rolled back
    assert scalar(dsn, "SELECT welcomed FROM users") is True
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.jobs") == 0
    assert scalar(dsn, "SELECT count(*) FROM pgqueue.job_history") == 1


def test_plain_example(fresh_db):
    project = EXAMPLES / "plain"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PGQUEUE_")},
           "DATABASE_URL": fresh_db}  # fmt: skip
    run([PGQ, "migrate"], project, env)
    worker = _start_worker("tasks:pgq", project, env)
    try:
        out = run([sys.executable, "enqueue.py"], project, env, timeout=60)
    finally:
        _stop(worker)
    assert out.strip() == "job 1: 5"
    assert scalar(fresh_db, "SELECT count(*) FROM orders") == 1


def test_plain_example_tests_run_the_job_without_a_worker(pg_server):
    """The example's own test suite (examples/plain/test_tasks.py), as its README runs it:
    `pytest` in its directory, pgqueue's plugin from its pytest.ini, no worker anywhere."""
    project = EXAMPLES / "plain"
    env = {**{k: v for k, v in os.environ.items()
              if not k.startswith("PGQUEUE_") and k != "DATABASE_URL"},
           "PGQUEUE_TEST_DSN": pg_server.admin_dsn, "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    out = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], project, env)
    assert "2 passed" in out

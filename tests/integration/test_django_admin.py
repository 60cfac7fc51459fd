"""The admin's pgqueue pages, driven by Django's test client as a logged-in superuser in a real
project process, on real PostgreSQL, with a real worker holding a running job: every page is
read-only (no Save, a POST is 403, no add or delete), titled by its row, linked to the others,
and the actions (replay a dead letter, cancel a running job, pause and resume a queue) work."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import scalar, wait_for
from tests.integration.django_project import (
    manage,
    ok,
    project_env,
    start_worker,
    stop,
    write_project,
)

# Runs in `manage.py shell`: every request the test checks, as JSON (status, and what the page
# shows), in the order the test reads them.
ADMIN_SESSION = r"""
import json, os, re
from django.contrib.auth.models import User
from django.test import Client

dead, running = int(os.environ["DEAD_ID"]), int(os.environ["RUNNING_ID"])
client = Client()
client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
out = {}


def page(name, url, method="get", data=None):
    response = getattr(client, method)(url, data or {})
    text = response.content.decode() if response.status_code == 200 else ""
    title = re.search(r"<title>(.*?)</title>", text, re.S)
    out[name] = {
        "status": response.status_code,
        "title": title.group(1).strip() if title else None,
        "save": 'name="_save"' in text or 'name="_continue"' in text,
        "links": sorted(set(re.findall(r'href="(/admin/pgqueue/[^"]*)"', text))),
        "actions": sorted(set(re.findall(r'<option value="(\w+)"', text))),
        "location": response.get("Location"),
    }


base = "/admin/pgqueue"
for model, pk in (("deadletter", dead), ("runningjob", running), ("queuestat", "orders")):
    page(f"{model}_change", f"{base}/{model}/{pk}/change/")
    page(f"{model}_post", f"{base}/{model}/{pk}/change/", "post", {"queue": "elsewhere"})
    page(f"{model}_add", f"{base}/{model}/add/")
    page(f"{model}_add_post", f"{base}/{model}/add/", "post", {"queue": "x"})
    page(f"{model}_delete", f"{base}/{model}/{pk}/delete/", "post", {"post": "yes"})
    page(f"{model}_list", f"{base}/{model}/")
page("slow_queue", f"{base}/queuestat/slow/change/")

# A staff user who may only view: the pages, but no action.
from django.contrib.auth.models import Permission
from pgqueue.contrib.django.models import DeadLetter
viewer = User.objects.create_user("viewer", "viewer@example.com", "pw", is_staff=True)
viewer.user_permissions.set(Permission.objects.filter(codename__startswith="view_",
                                                      content_type__app_label="pgqueue"))
admin_client, client = client, Client()
client.force_login(viewer)
page("viewer_list", f"{base}/deadletter/")
page("viewer_replay", f"{base}/deadletter/", "post",
     {"action": "replay", "_selected_action": [dead]})
out["viewer_left"] = DeadLetter.objects.count()
client = admin_client
page("cancel", f"{base}/runningjob/", "post",
     {"action": "cancel", "_selected_action": [running]})
page("pause", f"{base}/queuestat/", "post",
     {"action": "pause", "_selected_action": ["orders"]})
page("replay", f"{base}/deadletter/", "post",
     {"action": "replay", "_selected_action": [dead]})
print(json.dumps(out))
"""


def test_admin_pages_are_read_only_titled_linked_and_act(tmp_path: Path, fresh_db: str) -> None:
    project = write_project(tmp_path / "project")
    env = project_env(fresh_db)
    ok(manage(project, env, "migrate", "--no-input"))
    # A dead letter (a charge that fails for good) and a job a worker holds (a slow one).
    charge = ("orders.tasks.charge", "--queue", "orders", "--max-attempts", "1")
    dead = int(ok(manage(project, env, "pgq", "enqueue", *charge, "--args", '{"order_id": 31}')))
    ok(manage(project, env, "pgq", "work", "orders.tasks:pgq", "--queue", "orders", "--burst"))
    slow = ("orders.tasks.slow", "--queue", "slow", "--args", '{"seconds": 60}')
    running = int(ok(manage(project, env, "pgq", "enqueue", *slow)))
    worker = start_worker(project, env, "--queue", "slow")
    try:
        wait_for(lambda: scalar(fresh_db, "SELECT count(*) FROM pgqueue.running_jobs") == 1)
        session = manage(project, {**env, "DEAD_ID": str(dead), "RUNNING_ID": str(running)},
                         "shell", "-c", ADMIN_SESSION)  # fmt: skip
        pages = json.loads(ok(session).strip().splitlines()[-1])
        # The cancel action reached the worker: the handler saw it and the job ended cancelled.
        wait_for(lambda: scalar(fresh_db, "SELECT count(*) FROM pgqueue.running_jobs") == 0)
    finally:
        stop(worker)

    # Titled by the row; no Save; links between the rows.
    dead_page = pages["deadletter_change"]
    assert dead_page["status"] == 200
    assert dead_page["title"].startswith(f"dead letter {dead} · orders.tasks.charge |")
    assert not dead_page["save"]
    assert "/admin/pgqueue/queuestat/orders/change/" in dead_page["links"]
    job_page = pages["runningjob_change"]
    assert job_page["status"] == 200
    assert job_page["title"].startswith(f"job {running} · orders.tasks.slow |")
    assert not job_page["save"]
    assert "/admin/pgqueue/queuestat/slow/change/" in job_page["links"]
    queue_page = pages["queuestat_change"]
    assert queue_page["title"].startswith("queue orders |")
    assert not queue_page["save"]
    assert "/admin/pgqueue/deadletter/?queue__exact=orders" in queue_page["links"]
    assert "/admin/pgqueue/runningjob/?queue__exact=slow" in pages["slow_queue"]["links"]

    # Nothing written through a form: every POST to a row, every add and delete is refused.
    for model in ("deadletter", "runningjob", "queuestat"):
        for what in ("post", "add", "add_post", "delete"):
            assert pages[f"{model}_{what}"]["status"] == 403, (model, what, pages)
        assert pages[f"{model}_list"]["status"] == 200
        assert "delete_selected" not in pages[f"{model}_list"]["actions"]
    assert "replay" in pages["deadletter_list"]["actions"]
    assert "cancel" in pages["runningjob_list"]["actions"]
    assert {"pause", "resume"} <= set(pages["queuestat_list"]["actions"])

    # A user who may only view sees the rows, and no action runs for them.
    assert pages["viewer_list"]["status"] == 200
    assert "replay" not in pages["viewer_list"]["actions"]
    assert pages["viewer_left"] == 1

    # The actions did what they say.
    for action in ("cancel", "pause", "replay"):
        assert pages[action]["status"] == 302, (action, pages[action])
    assert scalar(fresh_db, "SELECT count(*) FROM pgqueue.dead_letters") == 0
    assert scalar(fresh_db, "SELECT state FROM pgqueue.jobs WHERE id = %s", (dead,)) == "ready"
    assert scalar(fresh_db, "SELECT paused FROM pgqueue.queue_stats WHERE queue = 'orders'")
    assert scalar(fresh_db, "SELECT state FROM pgqueue.job_history WHERE id = %s", (running,)) == (
        "cancelled"
    )

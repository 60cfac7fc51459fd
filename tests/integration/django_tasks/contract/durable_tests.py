"""Durable Django tasks run by a real ``manage.py pgq work``: steps that replay after a retry, a
transactional step whose ORM writes commit with its checkpoint, ``takes_context`` tasks, what
``TaskResult`` and the task signals say while a task sleeps or waits for an event and after it
resumes, and events emitted by a view in its ``atomic()`` block."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any, ClassVar

from django.db import connection
from django.tasks import TaskResult, TaskResultStatus
from django.test import TransactionTestCase
from django.utils import timezone

from pgqueue.contrib.django import aemit_event, queue
from tests.integration.django_tasks.billing import durable
from tests.integration.django_tasks.billing.models import Event
from tests.integration.django_tasks.contract.worker import start_worker, stop_worker, wait_finished


def calls(name: str) -> int:
    return Event.objects.filter(name=name).count()


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout}s")
        time.sleep(0.05)


def job_state(result: TaskResult[..., Any]) -> str | None:
    with connection.cursor() as cur:
        cur.execute("SELECT state FROM pgqueue.jobs WHERE id = %s", [int(result.id)])
        row = cur.fetchone()
    return None if row is None else str(row[0])


def wait_parked(result: TaskResult[..., Any], first_call: str) -> None:
    """Until the task made its first call and left the worker (its job ``scheduled``)."""
    wait_until(
        f"parked after {first_call!r}",
        lambda: calls(first_call) == 1 and job_state(result) == "scheduled",
    )
    result.refresh()


def signals(result: TaskResult[..., Any]) -> list[tuple[str, str]]:
    """The task signals the worker sent for ``result``'s task, in order: (signal, status)."""
    rows = Event.objects.filter(name__endswith=f" {result.id}").order_by("id")
    return [(row.name.split()[0], row.value["status"]) for row in rows]


class DurableTaskTestCase(TransactionTestCase):
    worker: ClassVar[subprocess.Popen[str]]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # The queue "own-worker" is served by the workers a test starts for itself.
        cls.worker = start_worker("--queue", "default")

    @classmethod
    def tearDownClass(cls) -> None:
        output = stop_worker(cls.worker)
        queue().close()
        super().tearDownClass()
        print(output[-4000:])

    def test_steps_replay_and_an_orm_step_commits_with_its_checkpoint(self) -> None:
        result = wait_finished(durable.durable_order.enqueue(7))
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)
        entry = Event.objects.get(name="ledger 7")  # the failed try's INSERT was rolled back
        self.assertEqual(
            result.return_value,
            {"charge": "charge 7", "entry": entry.id, "ship": "ship 7", "attempt": 3},
        )
        self.assertEqual([calls("charge 7"), calls("ship 7")], [1, 1])
        self.assertEqual([e.exception_class for e in result.errors], [RuntimeError, TimeoutError])
        self.assertEqual(result.attempts, 3)
        with connection.cursor() as cur:
            cur.execute(
                "SELECT name, state, attempts FROM pgqueue.job_step_status WHERE job_id = %s "
                "ORDER BY seq",
                [int(result.id)],
            )
            steps = cur.fetchall()
        self.assertEqual(
            steps,
            [("charge", "succeeded", 1), ("ledger", "succeeded", 2), ("ship", "succeeded", 1)],
        )

    def test_steps_replay_after_the_worker_was_killed(self) -> None:
        result = durable.crashing_order.enqueue(14)
        lease = ("--queue", "own-worker", "--lease", "2", "--reaper-interval", "0.5")
        doomed = start_worker(*lease)
        try:
            doomed.wait(timeout=60)
        finally:
            doomed.kill()
        self.assertEqual(doomed.returncode, -signal.SIGKILL)
        self.assertEqual([calls("charge 14"), calls("ledger 14"), calls("ship 14")], [1, 1, 0])
        recovering = start_worker(*lease)
        try:
            wait_finished(result, timeout=60)
        finally:
            print(stop_worker(recovering)[-2000:])
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)
        entry = Event.objects.get(name="ledger 14")
        self.assertEqual(
            result.return_value,
            {"charge": "charge 14", "entry": entry.id, "ship": "ship 14", "attempt": 2},
        )
        self.assertEqual([calls("charge 14"), calls("ship 14")], [1, 1])

    def test_a_task_that_takes_django_context_has_the_job_context_too(self) -> None:
        result = wait_finished(durable.durable_with_context.enqueue(8))
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)
        self.assertEqual(result.return_value, {"charge": "charge 8", "attempt": 2})
        self.assertEqual(calls("charge 8"), 1)

    def test_a_sleeping_task_reads_ready_and_resumes_to_its_result(self) -> None:
        result = durable.sleepy.enqueue(9, 3.0)
        wait_parked(result, "charge 9")
        parked_seen = timezone.now()
        # Parked: not running on any worker, due to run again (as a task waiting for a retry).
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertIs(result.is_finished, False)
        self.assertIsNotNone(result.started_at)
        self.assertEqual(result.last_attempted_at, result.started_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.errors, [])
        self.assertEqual(signals(result), [("started", "RUNNING"), ("finished", "READY")])

        wait_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)
        self.assertEqual(result.return_value, "reminded 9")
        self.assertEqual([calls("charge 9"), calls("remind 9")], [1, 1])
        self.assertEqual(result.errors, [])
        self.assertEqual(result.attempts, 1)  # a sleep is no attempt
        assert result.started_at is not None and result.last_attempted_at is not None
        assert result.enqueued_at is not None and result.finished_at is not None
        self.assertLess(result.started_at, parked_seen)  # the first run's start
        self.assertGreater(result.last_attempted_at, parked_seen)  # the run that resumed
        self.assertGreaterEqual(
            (result.finished_at - result.enqueued_at).total_seconds(), 3.0 - 0.5
        )
        self.assertEqual(
            signals(result),
            [
                ("started", "RUNNING"),
                ("finished", "READY"),
                ("started", "RUNNING"),
                ("finished", "SUCCESSFUL"),
            ],
        )

    def test_a_views_rolled_back_emit_wakes_nobody_its_committed_one_does(self) -> None:
        result = durable.wait_packed.enqueue(10, 60.0)
        wait_parked(result, "charge 10")
        self.assertEqual(result.status, TaskResultStatus.READY)

        with self.assertRaisesMessage(RuntimeError, "the label printer jammed"):
            self.client.post(
                "/orders/10/packed?fail=1", {"parcel": "P-1"}, content_type="application/json"
            )
        self.assertEqual(calls("packed 10"), 0)
        time.sleep(1.5)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertEqual(job_state(result), "scheduled")

        response = self.client.post(
            "/orders/10/packed", {"parcel": "P-2"}, content_type="application/json"
        )
        self.assertEqual(response.json(), {"emitted": True})
        wait_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)
        self.assertEqual(result.return_value, {"parcel": "P-2"})
        self.assertEqual([calls("charge 10"), calls("ship 10")], [1, 1])
        self.assertEqual(
            signals(result),
            [
                ("started", "RUNNING"),
                ("finished", "READY"),
                ("started", "RUNNING"),
                ("finished", "SUCCESSFUL"),
            ],
        )

    def test_a_waiting_task_cancelled_reads_failed(self) -> None:
        result = durable.wait_packed.enqueue(17, 60.0)
        wait_parked(result, "charge 17")
        self.assertEqual(queue().cancel(int(result.id), conn=connection), "cancelled")
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertIs(result.is_finished, True)
        self.assertIsNotNone(result.finished_at)
        self.assertEqual(calls("ship 17"), 0)

    def test_a_wait_times_out(self) -> None:
        result = wait_finished(durable.wait_packed.enqueue(11, 1.0))
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)
        self.assertEqual(result.return_value, "refund 11")
        self.assertEqual([calls("charge 11"), calls("ship 11")], [1, 0])

    async def test_an_async_view_emits_and_an_async_task_sleeps(self) -> None:
        waiting = await durable.wait_packed.aenqueue(12, 60.0)
        sleeping = await durable.sleepy_async.aenqueue(13, 1.0)
        self.assertIs(await aemit_event("order-12-packed", {"parcel": "P-3"}), True)
        self.assertIs(await aemit_event("order-12-packed", {"parcel": "P-4"}), False)
        deadline = time.monotonic() + 30
        while not (waiting.is_finished and sleeping.is_finished):
            self.assertLess(time.monotonic(), deadline, (waiting, sleeping))
            await waiting.arefresh()
            await sleeping.arefresh()
        self.assertEqual(waiting.return_value, {"parcel": "P-3"})  # the first emit wins
        self.assertEqual(sleeping.status, TaskResultStatus.SUCCESSFUL, sleeping.errors)
        self.assertEqual(sleeping.return_value, "reminded 13")
        self.assertEqual(await Event.objects.filter(name="charge 13").acount(), 1)

    def test_a_parked_run_is_logged_without_a_traceback(self) -> None:
        result = durable.sleepy.using(backend="retrying", queue_name="own-worker").enqueue(16, 0.2)
        worker = start_worker("--queue", "own-worker")
        try:
            wait_finished(result, timeout=60)
        finally:
            output = stop_worker(worker)
        self.assertEqual(result.return_value, "reminded 16")
        # Django's log of task_finished: READY after the run that parked, no traceback.
        self.assertIn(f"Task id={result.id} path={durable.sleepy.module_path} state=READY", output)
        self.assertNotIn("JobParked", output)

    # An async Django task runs in asgiref's async_to_sync, on an event loop of the handler
    # thread's own: its step_async must not open the worker's async transaction pool on that
    # loop, which ends with the run (the worker's close() of the pool at shutdown then raised
    # CancelledError and the worker exited with a traceback).
    def test_a_worker_that_ran_an_async_tasks_steps_stops_cleanly(self) -> None:
        task = durable.sleepy_async.using(backend="retrying", queue_name="own-worker")
        result = task.enqueue(15, 0.2)
        worker = start_worker("--queue", "own-worker")
        try:
            wait_finished(result, timeout=60)
        finally:
            output = stop_worker(worker)
        self.assertEqual(result.return_value, "reminded 15")
        self.assertNotIn("Traceback", output, output[-3000:])
        self.assertEqual(worker.returncode, 0, output[-3000:])

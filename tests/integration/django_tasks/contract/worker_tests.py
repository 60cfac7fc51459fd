"""Django's tasks run by a real ``manage.py pgq work`` (no APP): results, errors, context,
async tasks, priority, run_after, retries, signals, and pgqueue's own tasks beside them."""

from __future__ import annotations

import subprocess
import time
from datetime import timedelta
from typing import Any, ClassVar

from django.db import transaction
from django.tasks import Task, TaskResultStatus, default_task_backend
from django.test import TransactionTestCase
from django.utils import timezone

from pgqueue.contrib.django import queue
from tests.integration.django_tasks.billing import tasks as test_tasks
from tests.integration.django_tasks.billing.models import Event
from tests.integration.django_tasks.contract.worker import start_worker, stop_worker, wait_finished
from tests.integration.django_tasks.shop.models import Order
from tests.integration.django_tasks.shop.tasks import send_receipt


class WorkerTestCase(TransactionTestCase):
    worker: ClassVar[subprocess.Popen[str]]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.worker = start_worker()

    @classmethod
    def tearDownClass(cls) -> None:
        output = stop_worker(cls.worker)
        queue().close()  # the pool of the jobs enqueued by pgqueue's API, before the test db goes
        super().tearDownClass()
        # What the worker said, for a failure's report.
        print(output[-4000:])

    def assert_timeline(self, result: Any) -> None:
        self.assertIsNotNone(result.enqueued_at)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNotNone(result.finished_at)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertGreaterEqual(result.last_attempted_at, result.started_at)
        self.assertGreaterEqual(result.finished_at, result.last_attempted_at)

    def test_result(self) -> None:
        result = wait_finished(test_tasks.calculate_meaning_of_life.enqueue())
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)
        self.assert_timeline(result)
        self.assertEqual(result.attempts, 1)
        self.assertEqual(len(result.worker_ids), 1)
        self.assertEqual(result.errors, [])

    def test_enqueue_task(self) -> None:
        tasks: list[Task[..., Any]] = [test_tasks.noop_task, test_tasks.noop_task_async]
        for t in tasks:
            with self.subTest(t):
                result = wait_finished(t.enqueue(1, two=3))
                self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
                self.assertIsNone(result.return_value)
                self.assertEqual(result.task, t)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 1)

    def test_async_task_result(self) -> None:
        result = wait_finished(test_tasks.add_async.enqueue(2, b=3))
        self.assertEqual(result.return_value, 5)

    async def test_aenqueue_and_aget_result(self) -> None:
        result = await test_tasks.calculate_meaning_of_life.aenqueue()
        deadline = time.monotonic() + 30
        while not result.is_finished and time.monotonic() < deadline:
            await result.arefresh()
        got = await default_task_backend.aget_result(result.id)
        self.assertEqual(got.return_value, 42)

    def test_catches_exception(self) -> None:
        cases = [
            (test_tasks.failing_task_value_error, ValueError, "This task failed due to ValueError"),
            (test_tasks.failing_task_system_exit, SystemExit, "This task failed due to SystemExit"),
        ]
        for t, exception, message in cases:
            with self.subTest(t):
                result = wait_finished(t.enqueue())
                self.assertEqual(result.status, TaskResultStatus.FAILED)
                with self.assertRaisesMessage(ValueError, "Task failed"):
                    result.return_value  # noqa: B018
                self.assert_timeline(result)
                self.assertEqual(len(result.errors), 1)
                self.assertEqual(result.errors[0].exception_class, exception)
                traceback = result.errors[0].traceback
                self.assertTrue(traceback.endswith(f"{exception.__name__}: {message}\n"), traceback)
                self.assertEqual(result.task, t)
                self.assertEqual(result.attempts, 1)

    def test_complex_exception(self) -> None:
        result = wait_finished(test_tasks.complex_exception.enqueue())
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        # Django's private field (its own tests read it too), which django-stubs leave out.
        self.assertIsNone(result._return_value)  # type: ignore[attr-defined]
        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn('ValueError(ValueError("This task failed"))', result.errors[0].traceback)

    def test_complex_return_value(self) -> None:
        result = wait_finished(test_tasks.complex_return_value.enqueue())
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        # Django's private field (its own tests read it too), which django-stubs leave out.
        self.assertIsNone(result._return_value)  # type: ignore[attr-defined]
        self.assertEqual(result.errors[0].exception_class, TypeError)
        self.assertIn("Unsupported type", result.errors[0].traceback)

    def test_takes_context(self) -> None:
        result = wait_finished(test_tasks.get_task_id.enqueue())
        self.assertEqual(result.return_value, result.id)

    def test_context_attempt(self) -> None:
        result = wait_finished(test_tasks.check_context.enqueue(1))
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL, result.errors)

    def test_retries_keep_every_attempts_error(self) -> None:
        result = wait_finished(test_tasks.fails_once.enqueue())
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 2)
        self.assertEqual(result.attempts, 2)
        self.assertEqual(result.backend, "retrying")
        self.assertEqual(len(result.errors), 1)
        self.assertEqual(result.errors[0].exception_class, RuntimeError)
        self.assertIn("first attempt fails", result.errors[0].traceback)
        self.assert_timeline(result)

    def test_orm_and_the_callers_transaction(self) -> None:
        order = Order.objects.create(email="a@example.com")
        try:
            with transaction.atomic():
                refused = test_tasks.invoice.enqueue(order.id)
                raise RuntimeError("the view failed")
        except RuntimeError:
            pass
        with transaction.atomic():
            kept = test_tasks.invoice.enqueue(order.id)
        result = wait_finished(kept)
        self.assertEqual(result.return_value, f"invoiced {order.id}")
        order.refresh_from_db()
        self.assertIs(order.invoiced, True)
        with self.assertRaises(Exception):  # noqa: B017 - TaskResultDoesNotExist
            default_task_backend.get_result(refused.id)

    def test_run_after(self) -> None:
        run_after = timezone.now() + timedelta(seconds=2)
        result = test_tasks.noop_task.using(run_after=run_after).enqueue()
        time.sleep(0.5)
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)
        wait_finished(result)
        assert result.started_at is not None
        self.assertGreaterEqual(result.started_at, run_after)

    def test_priority_order(self) -> None:
        # Held behind a running task, then enqueued together: the worker (one slot) takes the
        # highest Django priority first.
        blocker = test_tasks.sleep_for.enqueue(1.0)
        while blocker.status == TaskResultStatus.READY:
            time.sleep(0.02)
            blocker.refresh()
        with transaction.atomic():
            for priority in (-50, 0, 100, 20):
                test_tasks.record.using(priority=priority).enqueue(f"p{priority}")
        deadline = time.monotonic() + 30
        while Event.objects.filter(name__startswith="p").count() < 4:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        names = list(
            Event.objects.filter(name__startswith="p").order_by("id").values_list("name", flat=True)
        )
        self.assertEqual(names, ["p100", "p20", "p0", "p-50"])

    def test_started_and_finished_signals_on_the_worker(self) -> None:
        result = wait_finished(test_tasks.calculate_meaning_of_life.enqueue())
        seen = list(
            Event.objects.filter(value__id=result.id).order_by("id").values_list("name", "value")
        )
        self.assertEqual(
            seen,
            [
                ("started", {"status": "RUNNING", "id": result.id}),
                ("finished", {"status": "SUCCESSFUL", "id": result.id}),
            ],
        )

    def test_running(self) -> None:
        result = test_tasks.sleep_for.enqueue(1.0)
        deadline = time.monotonic() + 30
        while result.status == TaskResultStatus.READY:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
            result.refresh()
        self.assertEqual(result.status, TaskResultStatus.RUNNING)
        self.assertIs(result.is_finished, False)
        self.assertIsNotNone(result.started_at)
        self.assertIsNotNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertEqual(result.attempts, 1)
        wait_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)

    def test_failed_task_logs_on_the_worker_and_keeps_its_arguments(self) -> None:
        result = wait_finished(test_tasks.failing_task_value_error.enqueue())
        self.assertEqual(result.args, [])
        self.assertEqual(result.kwargs, {})
        self.assertEqual(result.worker_ids[0], result.worker_ids[-1])

    def test_one_worker_runs_both_apps_and_both_apis(self) -> None:
        order = Order.objects.create(email="b@example.com")
        send_receipt.enqueue(order.id)  # shop: pgqueue's API
        test_tasks.charge.enqueue(order.id)  # billing: pgqueue's API, the same queue object
        wait_finished(test_tasks.invoice.enqueue(order.id))  # billing: Django's API
        deadline = time.monotonic() + 30
        while not (order.receipt_sent and order.charged and order.invoiced):
            self.assertLess(time.monotonic(), deadline, order.__dict__)
            time.sleep(0.05)
            order.refresh_from_db()

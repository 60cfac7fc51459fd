"""Django's backend contract for PgQueueBackend, without a worker: what enqueue returns, what
get_result reads back, Django's validation rules, and the caller's transaction. (The behaviours
of Django's own tests/tasks suite for backends, written for this backend.)"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.tasks import Task, TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued
from django.test import TestCase, TransactionTestCase, override_settings
from django.utils import timezone

from pgqueue.contrib.django.tasks import PgQueueBackend, PgQueueTask
from pgqueue.contrib.django.tasks import task as pgqueue_task
from tests.integration.django_tasks.billing import tasks as test_tasks
from tests.integration.django_tasks.shop.tasks import send_receipt


def job_row(job_id: str) -> tuple[Any, ...] | None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT task, queue, priority, args, state, max_attempts, meta, result_ttl "
            "FROM pgqueue.jobs WHERE id = %s",
            [int(job_id)],
        )
        row = cur.fetchone()
    # Django's cursor reads jsonb as text.
    return (
        None
        if row is None
        else tuple(json.loads(v) if i in (3, 6) else v for i, v in enumerate(row))
    )


#: A sync task and an async one.
BOTH_KINDS: list[Task[..., Any]] = [test_tasks.noop_task, test_tasks.noop_task_async]


class BackendTestCase(TestCase):
    def test_using_correct_backend(self) -> None:
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], PgQueueBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertEqual(default_task_backend.options, {"RESULT_TTL": 3600})
        self.assertIs(default_task_backend.supports_defer, True)
        self.assertIs(default_task_backend.supports_async_task, True)
        self.assertIs(default_task_backend.supports_get_result, True)
        self.assertIs(default_task_backend.supports_priority, True)
        self.assertIsInstance(test_tasks.noop_task, PgQueueTask)

    def assert_ready(self, result: Any, task: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
        self.assertIsInstance(result.id, str)
        self.assertEqual(result.status, TaskResultStatus.READY)
        self.assertIs(result.is_finished, False)
        self.assertIsNone(result.started_at)
        self.assertIsNone(result.last_attempted_at)
        self.assertIsNone(result.finished_at)
        self.assertIsNotNone(result.enqueued_at)
        with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
            result.return_value  # noqa: B018
        self.assertEqual(result.task, task)
        self.assertEqual(result.args, args)
        self.assertEqual(result.kwargs, kwargs)
        self.assertEqual(result.backend, "default")
        self.assertEqual(result.errors, [])
        self.assertEqual(result.attempts, 0)

    def test_enqueue_task(self) -> None:
        for t in BOTH_KINDS:
            with self.subTest(t):
                result = t.enqueue(1, two=3)
                self.assert_ready(result, t, [1], {"two": 3})
                task_name, queue, priority, args, state, *_ = job_row(result.id) or ()
                self.assertEqual(task_name, t.module_path)
                self.assertEqual((queue, priority, state), ("default", 0, "ready"))
                self.assertEqual(args, {"args": [1], "kwargs": {"two": 3}})

    async def test_enqueue_task_async(self) -> None:
        for t in BOTH_KINDS:
            with self.subTest(t):
                result = await t.aenqueue()
                self.assert_ready(result, t, [], {})

    def test_enqueue_with_tuples_and_nested_args(self) -> None:
        result = test_tasks.noop_task.enqueue((1, 2), key={"a": (3,)})
        self.assertEqual(result.args, [[1, 2]])
        self.assertEqual(result.kwargs, {"key": {"a": [3]}})
        self.assertEqual(default_task_backend.get_result(result.id).args, [[1, 2]])

    def test_arguments_must_be_json(self) -> None:
        with self.assertRaises(TypeError):
            test_tasks.noop_task.enqueue(datetime.now())

    def test_get_result(self) -> None:
        result = test_tasks.noop_task.enqueue(1, two=3)
        for got in (
            default_task_backend.get_result(result.id),
            test_tasks.noop_task.get_result(result.id),
        ):
            self.assertEqual(got.id, result.id)
            self.assert_ready(got, test_tasks.noop_task, [1], {"two": 3})
            assert result.enqueued_at is not None and got.enqueued_at is not None
            self.assertGreaterEqual(result.enqueued_at, got.enqueued_at)

    async def test_get_result_async(self) -> None:
        result = await test_tasks.noop_task.aenqueue(1, two=3)
        got = await default_task_backend.aget_result(result.id)
        self.assertEqual(got.id, result.id)
        self.assert_ready(got, test_tasks.noop_task, [1], {"two": 3})
        got = await test_tasks.noop_task.aget_result(result.id)
        self.assertEqual(got.id, result.id)

    def test_refresh_result(self) -> None:
        result = test_tasks.calculate_meaning_of_life.enqueue()
        before = result.enqueued_at
        result.refresh()
        self.assertEqual(result.status, TaskResultStatus.READY)
        assert result.enqueued_at is not None and before is not None
        self.assertLessEqual(result.enqueued_at, before)

    async def test_refresh_result_async(self) -> None:
        result = await test_tasks.calculate_meaning_of_life.aenqueue()
        await result.arefresh()
        self.assertEqual(result.status, TaskResultStatus.READY)

    def test_get_missing_result(self) -> None:
        for missing in ["123456789", "0", "-1", "not-an-id", "9" * 30]:
            with self.subTest(missing), self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(missing)

    async def test_get_missing_result_async(self) -> None:
        with self.assertRaises(TaskResultDoesNotExist):
            await default_task_backend.aget_result("123456789")

    def test_a_job_of_pgqueues_own_api_is_no_task_result(self) -> None:
        job_id = send_receipt.enqueue(1, conn=connection)
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(job_id))

    def test_get_result_of_another_task(self) -> None:
        result = test_tasks.noop_task.enqueue()
        with self.assertRaisesMessage(TaskResultMismatch, "Task does not match"):
            test_tasks.calculate_meaning_of_life.get_result(result.id)

    def test_priority_queue_and_run_after_are_kept(self) -> None:
        run_after = timezone.now() + timedelta(hours=1)
        t = test_tasks.noop_task.using(priority=10, queue_name="queue-1", run_after=run_after)
        result = t.enqueue()
        _, queue, priority, _, state, *_ = job_row(result.id) or ()
        # Django: higher runs first; pgqueue: lower runs first.
        self.assertEqual((queue, priority, state), ("queue-1", -10, "scheduled"))
        got = default_task_backend.get_result(result.id)
        self.assertEqual(got.task, t)
        self.assertEqual(got.task.priority, 10)
        self.assertEqual(got.task.queue_name, "queue-1")
        self.assertEqual(got.task.run_after, run_after)
        self.assertEqual(got.status, TaskResultStatus.READY)

    def test_lowest_and_highest_priority(self) -> None:
        for priority in (-100, 100):
            result = test_tasks.noop_task.using(priority=priority).enqueue()
            self.assertEqual(default_task_backend.get_result(result.id).task.priority, priority)

    def test_result_ttl_from_options(self) -> None:
        result = test_tasks.noop_task.enqueue()
        self.assertEqual((job_row(result.id) or ())[-1], timedelta(hours=1))

    def test_pgqueue_options_of_a_task(self) -> None:
        result = test_tasks.with_pgqueue_options.enqueue()
        *_, max_attempts, meta, _ = job_row(result.id) or ()
        self.assertEqual(max_attempts, 2)
        self.assertEqual(meta["team"], "billing")
        self.assertEqual(meta["django_task"], {"backend": "default"})

    def test_defaults_to_one_attempt(self) -> None:
        result = test_tasks.noop_task.enqueue()
        self.assertEqual((job_row(result.id) or ())[5], 1)

    def test_each_backends_options_per_job(self) -> None:
        # One pgqueue task per Django task, whichever backend saw it first: the attempts are
        # the enqueueing backend's.
        result = test_tasks.noop_task.using(backend="retrying").enqueue()
        *_, max_attempts, meta, _ = job_row(result.id) or ()
        self.assertEqual(max_attempts, 3)
        self.assertEqual(meta["django_task"], {"backend": "retrying"})
        for asked in ("retrying", "default"):
            got = task_backends[asked].get_result(result.id)
            self.assertEqual(got.backend, "retrying")
            self.assertEqual(got.task.backend, "retrying")

    def test_enqueued_signal_once_committed(self) -> None:
        seen: list[Any] = []

        def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((sender, task_result))

        task_enqueued.connect(receiver)
        try:
            with self.captureOnCommitCallbacks(execute=True):
                result = test_tasks.noop_task.enqueue()
                self.assertEqual(seen, [])  # not before the job is there for workers
        finally:
            task_enqueued.disconnect(receiver)
        self.assertEqual(seen, [(PgQueueBackend, result)])


class ValidationTestCase(TestCase):
    """Django's validate_task rules hold (and pgqueue adds its own where Django has none)."""

    def test_priority_range(self) -> None:
        for priority in (-101, 101, 1.5):
            with (
                self.subTest(priority),
                self.assertRaisesMessage(
                    InvalidTask, "priority must be a whole number between -100 and 100."
                ),
            ):
                # 1.5 is wrong on purpose: Django checks the priority at run time.
                test_tasks.noop_task.using(priority=priority)  # type: ignore[arg-type]

    def test_run_after_must_be_aware(self) -> None:
        with self.assertRaisesMessage(InvalidTask, "run_after must be an aware datetime."):
            test_tasks.noop_task.using(run_after=datetime.now())

    def test_unknown_queue(self) -> None:
        with self.assertRaisesMessage(InvalidTask, "Queue 'unknown' is not valid for backend."):
            test_tasks.noop_task.using(queue_name="unknown").enqueue()

    @override_settings(
        TASKS={
            "default": {
                "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
                "QUEUES": ["queue-1"],
            }
        }
    )
    def test_validate_on_enqueue(self) -> None:
        with self.assertRaisesMessage(
            InvalidTask, "Queue 'unknown_queue' is not valid for backend"
        ):
            test_tasks.noop_task.using(queue_name="unknown_queue").enqueue()

    def test_takes_context_needs_context_first(self) -> None:
        def no_context(x: int) -> None: ...

        no_context.__qualname__ = "no_context"  # as if at module level
        with self.assertRaisesMessage(
            InvalidTask, "Task takes context but does not have a first argument of 'context'."
        ):
            # Wrong on purpose (no context argument): Django refuses it at run time.
            task(takes_context=True)(no_context)  # type: ignore[arg-type]

    def test_module_level_function(self) -> None:
        with self.assertRaisesMessage(
            InvalidTask, "Task function must be defined at a module level."
        ):
            task()(lambda: None)

    def test_pgqueue_options_cannot_say_what_django_says(self) -> None:
        def clash() -> None: ...

        clash.__qualname__ = "clash"
        with self.assertRaisesMessage(InvalidTask, "'queue' is Django's to say"):
            pgqueue_task(pgqueue_options={"queue": "other"})(clash)

    def test_bad_pgqueue_options(self) -> None:
        def bad() -> None: ...

        bad.__qualname__ = "bad_options"
        with self.assertRaisesMessage(InvalidTask, "max_attempts"):
            pgqueue_task(pgqueue_options={"max_attempts": 0})(bad)

    def test_pgqueues_decorator_makes_a_pgqueue_task(self) -> None:
        def typed(month: str) -> int:
            return len(month)

        typed.__qualname__ = "typed_task"
        made = pgqueue_task(queue_name="queue-1", pgqueue_options={"max_attempts": 4})(typed)
        self.assertIsInstance(made, PgQueueTask)
        self.assertEqual((made.queue_name, made.pgqueue_options), ("queue-1", {"max_attempts": 4}))
        self.assertEqual(made.call("2026-01"), 7)

    @override_settings(
        TASKS={
            "default": {"BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend"},
            "dummy": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"},
        }
    )
    def test_pgqueues_decorator_refuses_another_backend(self) -> None:
        def elsewhere() -> None: ...

        elsewhere.__qualname__ = "elsewhere"
        with self.assertRaisesMessage(
            InvalidTask, "pgqueue's @task makes tasks of a PgQueueBackend: TASKS['dummy']"
        ):
            pgqueue_task(backend="dummy")(elsewhere)

    def test_unknown_backend_options(self) -> None:
        with (
            override_settings(
                TASKS={
                    "default": {
                        "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
                        "OPTIONS": {"RESULTS_TTL": 5},
                    }
                }
            ),
            self.assertRaisesMessage(InvalidTaskBackend, "unknown keys RESULTS_TTL"),
        ):
            task_backends["default"]

    def test_bad_result_ttl(self) -> None:
        with (
            override_settings(
                TASKS={
                    "default": {
                        "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
                        "OPTIONS": {"RESULT_TTL": -5},
                    }
                }
            ),
            self.assertRaisesMessage(InvalidTaskBackend, "RESULT_TTL"),
        ):
            task_backends["default"]

    def test_unknown_database(self) -> None:
        with (
            override_settings(
                TASKS={
                    "default": {
                        "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
                        "OPTIONS": {"DATABASE": "nope"},
                    }
                }
            ),
            self.assertRaisesMessage(InvalidTaskBackend, "no database 'nope'"),
        ):
            task_backends["default"]


class CallersTransactionTestCase(TransactionTestCase):
    """The job is written on Django's connection: it commits or rolls back with the caller."""

    def test_rollback_leaves_no_task(self) -> None:
        class Refused(Exception):
            pass

        with self.assertRaises(Refused), transaction.atomic():
            result = test_tasks.noop_task.enqueue()
            self.assertEqual(default_task_backend.get_result(result.id).status, "READY")
            raise Refused
        self.assertIsNone(job_row(result.id))
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(result.id)

    def test_commit_keeps_the_task(self) -> None:
        with transaction.atomic():
            result = test_tasks.noop_task.enqueue()
            with transaction.atomic():  # a savepoint
                inner = test_tasks.noop_task.enqueue()
        self.assertIsNotNone(job_row(result.id))
        self.assertIsNotNone(job_row(inner.id))

    def test_enqueued_signal_not_sent_on_rollback(self) -> None:
        seen: list[Any] = []

        def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append(task_result.id)

        task_enqueued.connect(receiver)
        try:
            with transaction.atomic():
                kept = test_tasks.noop_task.enqueue()
            try:
                with transaction.atomic():
                    test_tasks.noop_task.enqueue()
                    raise RuntimeError
            except RuntimeError:
                pass
        finally:
            task_enqueued.disconnect(receiver)
        self.assertEqual(seen, [kept.id])

    def test_enqueue_logs(self) -> None:
        with self.assertLogs("django.tasks", level="DEBUG") as captured:
            result = test_tasks.noop_task.enqueue()
        self.assertEqual(len(captured.output), 1)
        self.assertIn("enqueued", captured.output[0])
        self.assertIn(result.id, captured.output[0])

"""Django's task framework in the other app (and a pgqueue task of its own on the same
queue). The tasks mirror those of Django's own backend tests."""

from __future__ import annotations

import time
from typing import Any

from django.tasks import TaskContext, task
from django.tasks.signals import task_finished, task_started

from pgqueue.contrib.django import queue
from pgqueue.contrib.django.tasks import task as pgqueue_task
from tests.integration.django_tasks.billing import durable  # noqa: F401 - its tasks, for the worker
from tests.integration.django_tasks.billing.models import Event
from tests.integration.django_tasks.shop.models import Order

pgq = queue()


@pgq.task
def charge(order_id: int) -> None:
    Order.objects.filter(id=order_id).update(charged=True)


@task()
def invoice(order_id: int) -> str:
    Order.objects.filter(id=order_id).update(invoiced=True)
    return f"invoiced {order_id}"


@task()
def noop_task(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def noop_task_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def add_async(a: int, b: int) -> int:
    return a + b


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This task failed due to SystemExit")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value() -> Any:
    return {"set": {1, 2}}  # not JSON


@task(takes_context=True)
def get_task_id(context: TaskContext[[], str]) -> str:
    return context.task_result.id


@task(takes_context=True)
def check_context(context: TaskContext[[int], None], attempt: int) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task()
def record(name: str) -> None:
    Event.objects.create(name=name)


@task()
def sleep_for(seconds: float) -> None:
    time.sleep(seconds)


@task(backend="retrying", takes_context=True)
def fails_once(context: TaskContext[[], int]) -> int:
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return context.attempt


@pgqueue_task(pgqueue_options={"max_attempts": 2, "meta": {"team": "billing"}})
def with_pgqueue_options() -> None:
    return None


def _signal(name: str, sender: Any, task_result: Any, **kwargs: Any) -> None:
    if task_result.task.module_path.endswith(".calculate_meaning_of_life"):
        Event.objects.create(
            name=name,
            value={"status": str(task_result.status), "id": task_result.id},
        )


def _started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _signal("started", sender, task_result)


def _finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _signal("finished", sender, task_result)


task_started.connect(_started)
task_finished.connect(_finished)

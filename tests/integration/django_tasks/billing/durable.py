"""Durable Django tasks: steps (one on Django's connection, in the step's transaction), sleeps
and event waits, in Django's ``@task`` functions run by ``manage.py pgq work``. Each call of an
outside system is an ``Event`` row (``name``), so the tests count them."""

from __future__ import annotations

import os
import signal
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.tasks import TaskContext, task
from django.tasks.signals import task_finished, task_started

from pgqueue import EventTimeout, current_job
from tests.integration.django_tasks.billing.models import Event


def call(name: str) -> str:
    """An outside system's call (a payment, a carrier): a row, outside the step's transaction."""
    Event.objects.create(name=name)
    return name


def record_in_ledger(conn: BaseDatabaseWrapper, order_id: int, fail: bool) -> int:
    """A transactional step: an ORM write on Django's connection, in the transaction that
    commits the step's checkpoint; failing after the write rolls both back."""
    assert conn.in_atomic_block, "the step's transaction is an atomic() block"
    entry = Event.objects.create(name=f"ledger {order_id}")
    if fail:
        raise RuntimeError("the ledger write failed after its INSERT")
    return entry.id


@task(backend="retrying")  # three attempts, no backoff
def durable_order(order_id: int) -> dict[str, Any]:
    """Attempt 1 fails inside the transactional step (after its write), attempt 2 after it
    committed; attempt 3 replays both steps and ships."""
    ctx = current_job()
    charge = ctx.step("charge", call, f"charge {order_id}")
    entry = ctx.step("ledger", record_in_ledger, order_id, ctx.attempt == 1, transaction=connection)
    if ctx.attempt == 2:
        raise TimeoutError("the carrier timed out")
    ship = ctx.step("ship", call, f"ship {order_id}")
    return {"charge": charge, "entry": entry, "ship": ship, "attempt": ctx.attempt}


@task(backend="retrying", queue_name="own-worker")
def crashing_order(order_id: int) -> dict[str, Any]:
    """The worker dies (SIGKILL) on the first attempt after both steps committed; the attempt
    that recovers the job replays them."""
    ctx = current_job()
    charge = ctx.step("charge", call, f"charge {order_id}")
    entry = ctx.step("ledger", record_in_ledger, order_id, False, transaction=connection)
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    ship = ctx.step("ship", call, f"ship {order_id}")
    return {"charge": charge, "entry": entry, "ship": ship, "attempt": ctx.attempt}


@task(backend="retrying", takes_context=True)
def durable_with_context(context: TaskContext[[int], dict[str, Any]], order_id: int) -> Any:
    """A ``takes_context`` task: Django's context and pgqueue's job context side by side."""
    ctx = current_job()
    assert context.attempt == ctx.attempt, (context.attempt, ctx.attempt)
    assert context.task_result.id == str(ctx.id)
    charge = ctx.step("charge", call, f"charge {order_id}")
    if context.attempt == 1:
        raise TimeoutError("the carrier timed out")
    return {"charge": charge, "attempt": context.attempt}


@task()
def sleepy(order_id: int, seconds: float) -> str:
    """Charges, sleeps durably, sends a reminder."""
    ctx = current_job()
    ctx.step("charge", call, f"charge {order_id}")
    ctx.sleep(seconds)
    ctx.step("remind", call, f"remind {order_id}")
    return f"reminded {order_id}"


@task()
def wait_packed(order_id: int, timeout: float) -> Any:
    """Charges, waits for the warehouse's event ``order-<id>-packed``; refunds on timeout."""
    ctx = current_job()
    ctx.step("charge", call, f"charge {order_id}")
    try:
        parcel = ctx.wait_for_event(f"order-{order_id}-packed", timeout=timeout)
    except EventTimeout:
        return ctx.step("refund", call, f"refund {order_id}")
    ctx.step("ship", call, f"ship {order_id}")
    return parcel


@task()
async def sleepy_async(order_id: int, seconds: float) -> str:
    """:func:`sleepy` as an async task."""
    ctx = current_job()
    await ctx.step_async("charge", call_async, f"charge {order_id}")
    await ctx.sleep_async(seconds)
    await ctx.step_async("remind", call_async, f"remind {order_id}")
    return f"reminded {order_id}"


async def call_async(name: str) -> str:
    await Event.objects.acreate(name=name)
    return name


DURABLE_TASKS = ("sleepy", "wait_packed", "sleepy_async")


def _signal(name: str, task_result: Any) -> None:
    if task_result.task.name in DURABLE_TASKS:
        Event.objects.create(
            name=f"{name} {task_result.id}", value={"status": str(task_result.status)}
        )


def _started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _signal("started", task_result)


def _finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _signal("finished", task_result)


task_started.connect(_started)
task_finished.connect(_finished)

from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

from pgqueue import Item, current_job
from pgqueue.contrib.django import queue
from pgqueue.contrib.django.models import DeadLetter
from pgqueue.contrib.django.tasks import task
from shop.models import Order

pgq = queue()


@pgq.task(queue="emails", max_attempts=5, timeout=30)
def send_confirmation(order_id: int) -> str:
    order = Order.objects.get(id=order_id)
    order.confirmed = True
    order.save(update_fields=["confirmed"])
    return order.email


@pgq.task(batch_size=100, batch_wait=0.5)
def index(items: list[Item[int]]) -> None:
    Order.objects.filter(id__in=[item.args for item in items]).update(confirmed=True)


def dead_tasks() -> list[str]:
    return list(DeadLetter.objects.values_list("task", flat=True))


# Django's task framework (TASKS on PgQueueBackend), with pgqueue's options for its jobs.
@task(queue_name="reports", pgqueue_options={"timeout": 300, "max_attempts": 3})
def monthly_report(month: str) -> int:
    return Order.objects.filter(email__endswith=month).count()


# A durable Django task: steps (one in a transaction on Django's connection) and an event wait.
def charge_card(order_id: int) -> str:
    return f"ch_{order_id}"


def confirm(conn: BaseDatabaseWrapper, order_id: int) -> None:
    Order.objects.filter(id=order_id).update(confirmed=True)


@task()
def fulfil(order_id: int) -> str:
    job = current_job()
    charge: str = job.step("charge", charge_card, order_id)
    job.step("confirm", confirm, order_id, transaction=connection)
    parcel: Any = job.wait_for_event(f"order-{order_id}-packed", timeout=timedelta(days=2))
    return f"{charge} {parcel}"

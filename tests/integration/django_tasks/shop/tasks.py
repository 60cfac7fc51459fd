"""pgqueue's own API in one app: ``queue()`` is the project's queue, the one billing's
``tasks.py`` gets too."""

from pgqueue.contrib.django import queue
from tests.integration.django_tasks.shop.models import Order

pgq = queue()


@pgq.task(queue="mail")
def send_receipt(order_id: int) -> None:
    Order.objects.filter(id=order_id).update(receipt_sent=True)

"""The shop app's tasks, on pgqueue's own API. ``manage.py pgq work`` (or ``pgq work`` with
DJANGO_SETTINGS_MODULE set) imports every app's tasks module and runs them all, these and
billing's: Django is set up first, so the handlers use the ORM as views do."""

from pgqueue.contrib.django import queue
from shop.models import Order

pgq = queue()  # the project's queue on DATABASES["default"]: one object for every app


@pgq.task(queue="emails", result_ttl=3600)
def send_confirmation(order_id: int) -> str:
    order = Order.objects.get(id=order_id)
    order.confirmed = True
    order.save(update_fields=["confirmed"])
    return f"confirmed {order.email}"

"""The project's tasks. Workers run them with ``manage.py pgq work shop.tasks:pgq`` (or
``pgq work shop.tasks:pgq`` with DJANGO_SETTINGS_MODULE set): Django is set up first, so the
handlers use the ORM as views do."""

from pgqueue.contrib.django import queue
from shop.models import Order

pgq = queue()  # on DATABASES["default"]


@pgq.task(queue="emails", result_ttl=3600)
def send_confirmation(order_id: int) -> str:
    order = Order.objects.get(id=order_id)
    order.confirmed = True
    order.save(update_fields=["confirmed"])
    return f"confirmed {order.email}"

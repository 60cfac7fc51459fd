"""The billing app's tasks, written with Django's own task API (``django.tasks``): the
``TASKS`` setting runs them on pgqueue, and ``manage.py pgq work`` runs them beside shop's."""

from django.tasks import task

from billing.models import Invoice


@task(priority=10)  # Django's priority: higher runs first
def issue_invoice(order_id: int, total_cents: int) -> int:
    invoice, _ = Invoice.objects.get_or_create(
        order_id=order_id, defaults={"total_cents": total_cents}
    )
    return int(invoice.id)

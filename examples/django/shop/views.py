"""Enqueue in the request's transaction: the jobs exist if and only if the order does, with
pgqueue's API (``conn=connection``) and with Django's (the backend writes on the connection)."""

import json

from billing.tasks import issue_invoice
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse

from shop.models import Order
from shop.tasks import send_confirmation


def place_order(request: HttpRequest) -> JsonResponse:
    email = json.loads(request.body)["email"]
    with transaction.atomic():
        order = Order.objects.create(email=email)
        job = send_confirmation.enqueue(order.id, conn=connection)
        invoice = issue_invoice.enqueue(order.id, total_cents=1250)
    return JsonResponse({"order": order.id, "job": int(job), "invoice_task": invoice.id})


class OrderRefused(Exception):
    pass


def place_order_then_fail(request: HttpRequest) -> JsonResponse:
    """A view whose transaction rolls back after enqueueing: neither the order nor its job stay."""
    try:
        with transaction.atomic():
            order = Order.objects.create(email=json.loads(request.body)["email"])
            send_confirmation.enqueue(order.id, conn=connection)
            issue_invoice.enqueue(order.id, total_cents=1250)
            raise OrderRefused
    except OrderRefused:
        return JsonResponse({"refused": True}, status=409)

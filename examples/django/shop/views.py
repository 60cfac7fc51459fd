"""Enqueue in the request's transaction: the job exists if and only if the order does."""

import json

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse

from shop.models import Order
from shop.tasks import send_confirmation


def place_order(request: HttpRequest) -> JsonResponse:
    email = json.loads(request.body)["email"]
    with transaction.atomic():
        order = Order.objects.create(email=email)
        job = send_confirmation.enqueue(order.id, conn=connection)
    return JsonResponse({"order": order.id, "job": int(job)})


class OrderRefused(Exception):
    pass


def place_order_then_fail(request: HttpRequest) -> JsonResponse:
    """A view whose transaction rolls back after enqueueing: neither the order nor its job stay."""
    try:
        with transaction.atomic():
            order = Order.objects.create(email=json.loads(request.body)["email"])
            send_confirmation.enqueue(order.id, conn=connection)
            raise OrderRefused
    except OrderRefused:
        return JsonResponse({"refused": True}, status=409)

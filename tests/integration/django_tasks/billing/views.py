"""The warehouse's view: a parcel is packed, in one transaction with the event that wakes the
order's task (a view that fails rolls both back)."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse

from pgqueue.contrib.django import emit_event
from tests.integration.django_tasks.billing.models import Event


def packed(request: HttpRequest, order_id: int) -> JsonResponse:
    with transaction.atomic():
        Event.objects.create(name=f"packed {order_id}")
        emitted = emit_event(f"order-{order_id}-packed", json.loads(request.body))
        if request.GET.get("fail"):
            raise RuntimeError("the label printer jammed")
    return JsonResponse({"emitted": emitted})

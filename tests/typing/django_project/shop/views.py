from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse

from pgqueue.contrib.django import aemit_event, emit_event
from shop.models import Order
from shop.tasks import monthly_report, send_confirmation


def create_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=request.POST["email"])
        job: int = send_confirmation.enqueue(order.id, conn=connection)
    return JsonResponse({"order": order.id, "job": job})


def start_report(request: HttpRequest) -> JsonResponse:
    result = monthly_report.using(priority=10).enqueue(request.POST["month"])
    count: int | None = result.return_value if result.is_finished else None
    return JsonResponse({"task": result.id, "count": count})


def parcel_packed(request: HttpRequest, order_id: int) -> JsonResponse:
    with transaction.atomic():
        emitted: bool = emit_event(f"order-{order_id}-packed", {"parcel": request.POST["parcel"]})
    return JsonResponse({"emitted": emitted})


async def parcel_packed_async(request: HttpRequest, order_id: int) -> JsonResponse:
    emitted = await aemit_event(f"order-{order_id}-packed", None, keep=3600.0, using="default")
    return JsonResponse({"emitted": emitted})

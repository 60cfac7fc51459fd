from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse

from shop.models import Order
from shop.tasks import send_confirmation


def create_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=request.POST["email"])
        job: int = send_confirmation.enqueue(order.id, conn=connection)
    return JsonResponse({"order": order.id, "job": job})

"""Wrong on purpose: under the plugin, tasks keep their types."""

from pgqueue.contrib.django import emit_event
from shop.tasks import fulfil, monthly_report, send_confirmation

send_confirmation.options(queue="emails").enqueue("1")  # error: arg-type
confirmed: int = send_confirmation(1)  # error: assignment
monthly_report.enqueue(2026)  # error: arg-type
reported: str = monthly_report.call("2026-01")  # error: assignment
fulfil.enqueue("7")  # error: arg-type
emit_event("order-7-packed", keep="2d")  # error: arg-type

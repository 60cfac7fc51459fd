"""Wrong on purpose: under the plugin, tasks keep their types."""

from shop.tasks import monthly_report, send_confirmation

send_confirmation.options(queue="emails").enqueue("1")  # error: arg-type
confirmed: int = send_confirmation(1)  # error: assignment
monthly_report.enqueue(2026)  # error: arg-type
reported: str = monthly_report.call("2026-01")  # error: assignment

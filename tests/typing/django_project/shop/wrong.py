"""Wrong on purpose: under the plugin, tasks keep their types."""

from shop.tasks import send_confirmation

send_confirmation.options(queue="emails").enqueue("1")  # error: arg-type
confirmed: int = send_confirmation(1)  # error: assignment

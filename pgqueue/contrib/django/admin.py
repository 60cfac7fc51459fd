"""Read-only admin pages over pgqueue's views (the dashboard and ``pgq`` do the actions; the
dead-letter page can replay, through pgqueue's own API on the same database)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db import router

from pgqueue.contrib.django.models import DeadLetter, QueueStat, RunningJob

if TYPE_CHECKING:  # generic in django-stubs only: ModelAdmin[Any] fails at run time
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(_ModelAdmin):
    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(QueueStat)
class QueueStatAdmin(ReadOnlyAdmin):
    list_display = (
        *("queue", "ready", "scheduled", "running", "waiting", "dead"),
        *("oldest_ready_age", "paused", "succeeded_per_min", "failed_per_min"),
    )


@admin.register(RunningJob)
class RunningJobAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue", "task", "attempt", "max_attempts", "host", "pid",
                    "running_for", "lease_left", "cancel_requested")  # fmt: skip
    list_filter = ("queue", "task")


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue", "task", "attempts", "error_class", "last_error", "dead_at")
    list_filter = ("queue", "task", "error_class")
    search_fields = ("=id", "task", "last_error")
    actions = ("replay",)

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        # Needed for the replay action to be offered; the change form stays read-only
        # because every field is.
        return bool(request.user.has_perm("pgqueue.change_deadletter"))

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields]

    @admin.action(description="Replay the selected dead letters")
    def replay(self, request: Any, queryset: Any) -> None:
        from django.db import connections

        from pgqueue.contrib.django import queue

        alias = router.db_for_write(DeadLetter)
        ids = [int(i) for i in queryset.values_list("id", flat=True)]
        pgq = queue(alias)
        try:
            replayed = pgq.admin.replay_dead_letters(ids=ids, conn=connections[alias])
        finally:
            pgq.close()
        self.message_user(request, f"replayed {replayed} dead letter(s)", messages.SUCCESS)

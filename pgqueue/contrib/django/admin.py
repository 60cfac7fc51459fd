"""Read-only admin pages over pgqueue's views: queues, running jobs and dead letters, each
titled by its row and linked to the others. Nothing is written through a form (no add, no
change, no delete: a POST to a row is 403); what an operator does goes through pgqueue's own
API on the same database, as actions: replay dead letters, cancel running jobs, pause and
resume queues (offered to users with the model's ``change`` permission)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db import connections, router
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from pgqueue.client import PgQueue
from pgqueue.contrib.django.models import DeadLetter, QueueStat, RunningJob

if TYPE_CHECKING:  # generic in django-stubs only: ModelAdmin[Any] fails at run time
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(_ModelAdmin):
    """View pages only; actions need the model's ``change`` permission (``has_act_permission``),
    which the change form itself never gets."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_act_permission(self, request: Any) -> bool:
        opts = self.model._meta
        return bool(request.user.has_perm(f"{opts.app_label}.change_{opts.model_name}"))

    def get_readonly_fields(self, request: Any, obj: Any = None) -> list[str]:
        return [field.name for field in self.model._meta.fields] + list(self.readonly_fields)

    def get_actions(self, request: Any) -> dict[str, Any]:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @contextmanager
    def queue_of(self, request: Any) -> Iterator[tuple[PgQueue, Any]]:
        """pgqueue on the database this model is read from, and Django's connection to it (the
        action's writes join the request's transaction, if it has one)."""
        from pgqueue.contrib.django import queue

        alias = router.db_for_write(self.model)
        pgq = queue(alias)
        try:
            yield pgq, connections[alias]
        finally:
            pgq.close()


def _queue_link(name: str) -> str:
    url = reverse("admin:pgqueue_queuestat_change", args=[quote(name)])  # a name may hold "/"
    return format_html('<a href="{}">{}</a>', url, name)


def _changelist_link(model: str, queue: str, text: str) -> str:
    url = reverse(f"admin:pgqueue_{model}_changelist")
    return format_html('<a href="{}?queue__exact={}">{}</a>', url, queue, text)


def _acting(description: str) -> Callable[[Callable[..., Any]], Any]:
    return admin.action(description=description, permissions=["act"])


@admin.register(QueueStat)
class QueueStatAdmin(ReadOnlyAdmin):
    list_display = (
        *("queue", "ready", "scheduled", "running", "waiting", "dead"),
        *("oldest_ready_age", "paused", "succeeded_per_min", "failed_per_min"),
    )
    readonly_fields = ("jobs",)
    actions = ("pause", "resume")

    @admin.display(description="jobs")
    def jobs(self, obj: QueueStat) -> str:
        return format_html_join(
            " · ",
            "{}",
            [
                (_changelist_link("runningjob", obj.queue, "running jobs"),),
                (_changelist_link("deadletter", obj.queue, "dead letters"),),
            ],
        )

    @_acting("Pause the selected queues (workers stop claiming; enqueue still works)")
    def pause(self, request: Any, queryset: Any) -> None:
        names = list(queryset.values_list("queue", flat=True))
        with self.queue_of(request) as (pgq, conn):
            for name in names:
                pgq.flow.pause_queue(name, conn=conn)
        self.message_user(request, f"paused {', '.join(names)}", messages.SUCCESS)

    @_acting("Resume the selected queues")
    def resume(self, request: Any, queryset: Any) -> None:
        names = list(queryset.values_list("queue", flat=True))
        with self.queue_of(request) as (pgq, conn):
            for name in names:
                pgq.flow.resume_queue(name, conn=conn)
        self.message_user(request, f"resumed {', '.join(names)}", messages.SUCCESS)


@admin.register(RunningJob)
class RunningJobAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue_link", "task", "attempt", "max_attempts", "host", "pid",
                    "running_for", "lease_left", "cancel_requested")  # fmt: skip
    list_filter = ("queue", "task")
    readonly_fields = ("queue_link",)
    actions = ("cancel",)

    @admin.display(description="queue", ordering="queue")
    def queue_link(self, obj: RunningJob) -> str:
        return _queue_link(obj.queue)

    @_acting("Cancel the selected jobs (their workers stop the handlers)")
    def cancel(self, request: Any, queryset: Any) -> None:
        ids = [int(i) for i in queryset.values_list("id", flat=True)]
        with self.queue_of(request) as (pgq, conn):
            results = [pgq.cancel(job_id, conn=conn) for job_id in ids]
        asked = sum(result != "not_found" for result in results)
        self.message_user(request, f"cancelling {asked} job(s)", messages.SUCCESS)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("id", "queue_link", "task", "attempts", "error_class", "last_error",
                    "dead_at")  # fmt: skip
    list_filter = ("queue", "task", "error_class")
    search_fields = ("=id", "task", "last_error")
    readonly_fields = ("queue_link",)
    actions = ("replay",)

    @admin.display(description="queue", ordering="queue")
    def queue_link(self, obj: DeadLetter) -> str:
        return _queue_link(obj.queue)

    @_acting("Replay (retry) the selected dead letters")
    def replay(self, request: Any, queryset: Any) -> None:
        ids = [int(i) for i in queryset.values_list("id", flat=True)]
        with self.queue_of(request) as (pgq, conn):
            replayed = pgq.admin.replay_dead_letters(ids=ids, conn=conn)
        self.message_user(request, f"replayed {replayed} dead letter(s)", messages.SUCCESS)

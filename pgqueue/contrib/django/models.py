"""Read-only models over pgqueue's operator views, for the Django admin (``managed = False``:
Django never creates, alters or writes them; pgqueue's migrations own the schema)."""

from __future__ import annotations

from django.db import models


class QueueStat(models.Model):
    queue = models.TextField(primary_key=True)
    ready = models.BigIntegerField()
    scheduled = models.BigIntegerField()
    running = models.BigIntegerField()
    waiting = models.BigIntegerField()
    dead = models.BigIntegerField()
    oldest_ready_age = models.DurationField(null=True)
    paused = models.BooleanField()
    succeeded_per_min = models.FloatField(null=True)
    failed_per_min = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = '"pgqueue"."queue_stats"'
        verbose_name = "queue"
        ordering = ("queue",)

    def __str__(self) -> str:
        return f"queue {self.queue}"


class RunningJob(models.Model):
    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    task = models.TextField()
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    worker_id = models.UUIDField(null=True)
    host = models.TextField(null=True)
    pid = models.IntegerField(null=True)
    started_at = models.DateTimeField(null=True)
    running_for = models.DurationField(null=True)
    lease_left = models.DurationField(null=True)
    cancel_requested = models.BooleanField()

    class Meta:
        managed = False
        db_table = '"pgqueue"."running_jobs"'
        verbose_name = "running job"
        ordering = ("id",)

    def __str__(self) -> str:
        return f"job {self.id} · {self.task}"


class DeadLetter(models.Model):
    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    task = models.TextField()
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    reason = models.TextField()
    error_class = models.TextField(null=True)
    last_error = models.TextField(null=True)
    traceback = models.TextField(null=True)
    worker_id = models.UUIDField(null=True)
    created_at = models.DateTimeField()
    dead_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = '"pgqueue"."dead_letter_errors"'
        verbose_name = "dead letter"
        ordering = ("-dead_at",)

    def __str__(self) -> str:
        return f"dead letter {self.id} · {self.task}"

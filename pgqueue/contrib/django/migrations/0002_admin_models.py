"""The admin's models over pgqueue's views, in Django's migration state only (``managed=False``:
no SQL runs; pgqueue's own migrations own the views). With them in the state, ``migrate``
creates their content types and permissions, so staff users can be given view (and, for the
actions, change) permissions on them, and ``makemigrations`` finds nothing to add."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("pgqueue", "0001_pgqueue_schema"),
    ]

    operations = [
        migrations.CreateModel(
            name="DeadLetter",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("queue", models.TextField()),
                ("task", models.TextField()),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("reason", models.TextField()),
                ("error_class", models.TextField(null=True)),
                ("last_error", models.TextField(null=True)),
                ("traceback", models.TextField(null=True)),
                ("worker_id", models.UUIDField(null=True)),
                ("created_at", models.DateTimeField()),
                ("dead_at", models.DateTimeField()),
            ],
            options={
                "verbose_name": "dead letter",
                "db_table": '"pgqueue"."dead_letter_errors"',
                "ordering": ("-dead_at",),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="QueueStat",
            fields=[
                ("queue", models.TextField(primary_key=True, serialize=False)),
                ("ready", models.BigIntegerField()),
                ("scheduled", models.BigIntegerField()),
                ("running", models.BigIntegerField()),
                ("waiting", models.BigIntegerField()),
                ("dead", models.BigIntegerField()),
                ("oldest_ready_age", models.DurationField(null=True)),
                ("paused", models.BooleanField()),
                ("succeeded_per_min", models.FloatField(null=True)),
                ("failed_per_min", models.FloatField(null=True)),
            ],
            options={
                "verbose_name": "queue",
                "db_table": '"pgqueue"."queue_stats"',
                "ordering": ("queue",),
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="RunningJob",
            fields=[
                ("id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("queue", models.TextField()),
                ("task", models.TextField()),
                ("attempt", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("worker_id", models.UUIDField(null=True)),
                ("host", models.TextField(null=True)),
                ("pid", models.IntegerField(null=True)),
                ("started_at", models.DateTimeField(null=True)),
                ("running_for", models.DurationField(null=True)),
                ("lease_left", models.DurationField(null=True)),
                ("cancel_requested", models.BooleanField()),
            ],
            options={
                "verbose_name": "running job",
                "db_table": '"pgqueue"."running_jobs"',
                "ordering": ("id",),
                "managed": False,
            },
        ),
    ]

"""A two-app Django 6 project for pgqueue's Django tests: ``shop`` uses pgqueue's own API,
``billing`` Django's task framework on :class:`~pgqueue.contrib.django.tasks.PgQueueBackend`.
The database is ``$PGQ_DJANGO_DSN`` (a libpq DSN)."""

import json
import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["PGQ_DJANGO_DSN"])

SECRET_KEY = "tests-only-not-secret"
USE_TZ = True
ROOT_URLCONF = "tests.integration.django_tasks.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "pgqueue.contrib.django",
    "tests.integration.django_tasks.shop",
    "tests.integration.django_tasks.billing",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}
TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
        "QUEUES": ["default", "queue-1", "mail"],
        "OPTIONS": {"RESULT_TTL": 3600},
    },
    "retrying": {
        "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
        "QUEUES": ["default", "own-worker"],
        "OPTIONS": {"TASK_OPTIONS": {"max_attempts": 3, "backoff": lambda attempt: 0}},
    },
}
# The tests change it to see what discovery does with it.
if "PGQ_TASK_MODULES" in os.environ:
    PGQUEUE_TASK_MODULES = json.loads(os.environ["PGQ_TASK_MODULES"])

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.tasks": {"handlers": ["console"], "level": "INFO"}},
}

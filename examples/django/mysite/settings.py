"""Settings of the example project: one PostgreSQL database, given by $DATABASE_URL
(``postgresql://user:password@host:5432/dbname``; ``pgq db url`` prints the embedded server's)."""

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["DATABASE_URL"])

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "pgqueue.contrib.django",  # manage.py migrate installs pgqueue's schema
    "shop",  # pgqueue's own API (shop/tasks.py)
    "billing",  # Django's task API (billing/tasks.py)
]

# Django's tasks (django.tasks) run on pgqueue: enqueued in the caller's transaction.
TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.tasks.PgQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"RESULT_TTL": 3600, "TASK_OPTIONS": {"max_attempts": 3}},
    }
}

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

"""The settings mypy's Django plugin loads (``[tool.django-stubs]`` in pyproject.toml) to learn the
models of the apps pgqueue ships and tests: nothing here connects to a database."""

SECRET_KEY = "typing-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgqueue.contrib.django",
    # The apps of the Django tests' project (tests/integration/django_tasks).
    "tests.integration.django_tasks.shop",
    "tests.integration.django_tasks.billing",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "typing"}}

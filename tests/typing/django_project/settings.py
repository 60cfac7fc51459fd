"""A user's Django project checked by ``mypy --strict`` with django-stubs' plugin
(tests/unit/test_typing_django.py)."""

SECRET_KEY = "typing-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "pgqueue.contrib.django",
    "shop",
]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "shop"}}

"""A Django task in a module not named tasks.py: workers import it only when
``PGQUEUE_TASK_MODULES`` names it."""

from django.tasks import task


@task()
def nightly() -> str:
    return "ran"

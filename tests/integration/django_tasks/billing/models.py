from django.db import models


class Event(models.Model):
    """What the tasks and the task signals saw, in order, for the tests to read."""

    name = models.CharField(max_length=200)
    value = models.JSONField(null=True)

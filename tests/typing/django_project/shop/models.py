from django.db import models


class Order(models.Model):
    email = models.TextField()
    confirmed = models.BooleanField(default=False)

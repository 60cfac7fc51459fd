from django.db import models


class Order(models.Model):
    email = models.CharField(max_length=200)
    receipt_sent = models.BooleanField(default=False)
    charged = models.BooleanField(default=False)
    invoiced = models.BooleanField(default=False)

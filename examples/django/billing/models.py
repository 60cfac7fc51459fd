from django.db import models


class Invoice(models.Model):
    order = models.OneToOneField("shop.Order", on_delete=models.CASCADE)
    total_cents = models.IntegerField()

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [("pgqueue", "0001_pgqueue_schema")]
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("email", models.CharField(max_length=200)),
                ("receipt_sent", models.BooleanField(default=False)),
                ("charged", models.BooleanField(default=False)),
                ("invoiced", models.BooleanField(default=False)),
            ],
        )
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    # The app's tables may refer to pgqueue's (views, foreign keys to jobs...): depend on it.
    dependencies = [("pgqueue", "0001_pgqueue_schema")]
    operations = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("email", models.TextField()),
                ("confirmed", models.BooleanField(default=False)),
            ],
        ),
    ]

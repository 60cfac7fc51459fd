from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [("shop", "0001_initial")]
    operations = [
        migrations.CreateModel(
            name="Invoice",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "order",
                    models.OneToOneField(on_delete=models.deletion.CASCADE, to="shop.order"),
                ),
                ("total_cents", models.IntegerField()),
            ],
        ),
    ]

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0005_export_batch_plural"),
    ]

    operations = [
        # A relation without a column (joined on user and period_start): no schema change.
        migrations.AddField(
            model_name="ledgeraccount",
            name="period",
            field=models.ForeignObject(
                from_fields=["user", "period_start"],
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="accounts",
                to="billing.period",
                to_fields=["user", "period_start"],
            ),
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("backtests", "0006_dry_run_pass_plural"),
    ]

    operations = [
        migrations.AddField(
            model_name="optimizationrun",
            name="decisions",
            field=models.JSONField(blank=True, null=True),
        ),
    ]

from django.db import migrations, models


def number_each_accounts_keys(apps, schema_editor):
    """Existing keys keep their order: each account's, by id, numbered from 1."""
    api_key = apps.get_model("accounts", "ApiKey")
    counts: dict[int, int] = {}
    for pk, user_id in api_key.objects.order_by("user_id", "pk").values_list("pk", "user_id"):
        counts[user_id] = counts.get(user_id, 0) + 1
        api_key.objects.filter(pk=pk).update(number=counts[user_id])


class Migration(migrations.Migration):
    dependencies = [("accounts", "0003_apikey_last4")]

    operations = [
        migrations.AddField(model_name="apikey", name="number", field=models.PositiveIntegerField(null=True)),
        migrations.RunPython(number_each_accounts_keys, migrations.RunPython.noop),
        migrations.AlterField(model_name="apikey", name="number", field=models.PositiveIntegerField()),
        migrations.AddConstraint(
            model_name="apikey",
            constraint=models.UniqueConstraint(fields=("user", "number"), name="apikey_number_unique"),
        ),
    ]

from django.db import migrations, models


def number_each_journal(apps, schema_editor):
    """Existing notes keep their order: each account's, by id, numbered from 1."""
    hypothesis = apps.get_model("evidence", "ResearchHypothesis")
    counts: dict[int, int] = {}
    for pk, user_id in hypothesis.objects.order_by("user_id", "pk").values_list("pk", "user_id"):
        counts[user_id] = counts.get(user_id, 0) + 1
        hypothesis.objects.filter(pk=pk).update(number=counts[user_id])


class Migration(migrations.Migration):
    dependencies = [("evidence", "0008_log_timestamp")]

    operations = [
        migrations.AddField(model_name="researchhypothesis", name="number", field=models.PositiveIntegerField(null=True)),
        migrations.RunPython(number_each_journal, migrations.RunPython.noop),
        migrations.AlterField(model_name="researchhypothesis", name="number", field=models.PositiveIntegerField()),
        migrations.AddConstraint(
            model_name="researchhypothesis",
            constraint=models.UniqueConstraint(fields=("user", "number"), name="evidence_hypothesis_number_unique"),
        ),
    ]

"""The large JSON a run writes (a grid point's daily returns and decisions, a report's trades and equity curve)
is TOASTed with lz4 instead of PostgreSQL's default pglz: writing a 2,516-day grid point cost the server 7.2-8.3 ms
of CPU with pglz, 5.0-6.7 ms with lz4 (most of it compressing the returns). New values only; a server built
without lz4 keeps the default, and so do other databases."""

from django.db import migrations

COLUMNS = {"backtests_optimizationrun": ("returns", "decisions"), "backtests_report": ("trades", "equity")}


def _compression(method: str) -> str:
    alters = [
        f"EXECUTE 'ALTER TABLE {table} {', '.join(f'ALTER COLUMN {c} SET COMPRESSION {method}' for c in columns)}'"
        for table, columns in COLUMNS.items()
    ]
    return f"DO $$ BEGIN {'; '.join(alters)}; EXCEPTION WHEN feature_not_supported THEN NULL; END $$;"


def lz4(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_compression("lz4"), params=None)


def default(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_compression("default"), params=None)


class Migration(migrations.Migration):
    dependencies = [("backtests", "0011_optimization_point_tasks")]

    operations = [migrations.RunPython(lz4, default)]

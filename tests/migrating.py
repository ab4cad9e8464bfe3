"""A data migration's test: the test database taken back to the migration before it, rows written through the
models as they were there, then the database taken forward again (a `transaction=True` test: migrating runs DDL)."""

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import Model

Migration = tuple[str, str]  # (app label, migration name)


def model_before(migration: Migration, model: str) -> type[Model]:
    """Migrate back to `migration` and return `model` (a model name of its app) as it was there."""
    MigrationExecutor(connection).migrate([migration])
    return MigrationExecutor(connection).loader.project_state([migration]).apps.get_model(migration[0], model)


def migrate_forward(migration: Migration) -> None:
    """Take the database forward to every app's latest migration, `migration` among them: stopping at `migration`
    would leave the later tests a schema without the app's newer migrations."""
    executor = MigrationExecutor(connection)
    assert migration in executor.loader.graph.nodes, f"{migration} is not a migration of this project"
    executor.migrate(executor.loader.graph.leaf_nodes())

"""Transfers are append-only: a PostgreSQL trigger refuses UPDATE, DELETE and TRUNCATE.

TRUNCATE is allowed only on connections that set `leroy.ledger_truncate=allowed` (the test settings do, so that
transactional tests can flush the database); production connections never set it.
"""

from django.db import migrations

FORBID = """
CREATE FUNCTION billing_forbid_mutation() RETURNS trigger AS $$ BEGIN
  IF TG_OP = 'TRUNCATE' AND current_setting('leroy.ledger_truncate', true) = 'allowed' THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'billing_transfer is append-only (% refused)', TG_OP;
END; $$ LANGUAGE plpgsql;
CREATE TRIGGER billing_transfer_append_only BEFORE UPDATE OR DELETE ON billing_transfer
  FOR EACH ROW EXECUTE FUNCTION billing_forbid_mutation();
CREATE TRIGGER billing_transfer_no_truncate BEFORE TRUNCATE ON billing_transfer
  FOR EACH STATEMENT EXECUTE FUNCTION billing_forbid_mutation();
"""
ALLOW = """
DROP TRIGGER billing_transfer_no_truncate ON billing_transfer;
DROP TRIGGER billing_transfer_append_only ON billing_transfer;
DROP FUNCTION billing_forbid_mutation();
"""


def forbid(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORBID, params=None)


def allow(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ALLOW, params=None)


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(forbid, allow)]

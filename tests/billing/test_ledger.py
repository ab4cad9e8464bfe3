import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F

from billing import services
from billing.models import AppendOnly, Code, Kind, LedgerAccount, Transfer, Unit

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mid_august")]
postgres_only = pytest.mark.skipif(settings.LEROY_TEST_DATABASE != "PostgreSQL", reason="PostgreSQL trigger")


@pytest.fixture
def charged(owner, charge):
    charge(owner, units=2)
    return Transfer.objects.get(code=Code.CHARGE)


def allowance(owner, unit=Unit.LOOKUP):
    return LedgerAccount.objects.get(user=owner, unit=unit, kind=Kind.ALLOWANCE)


@postgres_only
@pytest.mark.parametrize(
    "statement",
    ["UPDATE billing_transfer SET amount = 1", "DELETE FROM billing_transfer", "TRUNCATE billing_transfer CASCADE"],
)
def test_the_database_refuses_to_change_transfers(charged, statement):
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # TRUNCATE refuses to run with deferred checks pending
        cursor.execute("SET LOCAL leroy.ledger_truncate = ''")  # what every production connection has
        cursor.execute(statement)

    assert Transfer.objects.get(pk=charged.pk).amount == 2


def test_the_orm_refuses_to_change_transfers(charged):
    charged.amount = 1
    for attempt in (
        charged.save,
        charged.delete,
        lambda: Transfer.objects.filter(pk=charged.pk).update(amount=1),
        lambda: Transfer.objects.all().delete(),
    ):
        with pytest.raises(AppendOnly):
            attempt()

    assert Transfer.objects.get(pk=charged.pk).amount == 2


def test_the_database_refuses_to_overdraw_an_allowance(charged, owner):
    with pytest.raises(IntegrityError, match="debits_within_credits"), transaction.atomic():
        LedgerAccount.objects.filter(pk=allowance(owner).pk).update(debits_posted=F("credits_posted") + 1)


def test_an_idempotency_key_is_used_once(charged):
    with pytest.raises(IntegrityError), transaction.atomic():
        Transfer.objects.create(
            debit_account=charged.debit_account,
            credit_account=charged.credit_account,
            amount=1,
            unit=charged.unit,
            code=Code.CHARGE,
            period_start=charged.period_start,
            idempotency_key=charged.idempotency_key,
            occurred_at=charged.occurred_at,
        )


def test_the_database_lets_a_hold_resolve_only_once(owner):
    hold = services.credits_reserve(user=owner, amount=10, reference="job")
    services.credits_void(hold_id=hold.pk)
    voided = Transfer.objects.get(code=Code.VOID)

    with pytest.raises(IntegrityError, match=r"pending_resolves_once|pending_id"), transaction.atomic():
        Transfer.objects.create(
            debit_account=voided.debit_account,
            credit_account=voided.credit_account,
            amount=5,
            unit=voided.unit,
            code=Code.POST,
            pending_id=hold.pk,
            period_start=voided.period_start,
            idempotency_key="another-resolution",
            occurred_at=voided.occurred_at,
        )


def test_verify_ledger_passes_on_a_consistent_ledger(charged, owner, capsys):
    hold = services.credits_reserve(user=owner, amount=10, reference="job")
    services.credits_settle(hold_id=hold.pk, amount=4)
    services.credits_reserve(user=owner, amount=7, reference="open-job")

    call_command("verify_ledger")

    assert "ledger ok" in capsys.readouterr().out


def test_verify_ledger_detects_injected_drift(charged, owner, capsys):
    LedgerAccount.objects.filter(pk=allowance(owner).pk).update(debits_posted=F("debits_posted") - 1)

    with pytest.raises(CommandError, match=r"drift in 1 account"):
        call_command("verify_ledger")

    assert f'"ledger_account": {allowance(owner).pk}' in capsys.readouterr().err


def test_nightly_ledger_task_logs_and_counts_drift(charged, owner, caplog):
    from billing.tasks import ledger_verify

    assert ledger_verify() == 0
    LedgerAccount.objects.filter(pk=allowance(owner).pk).update(debits_posted=F("debits_posted") - 1)

    assert ledger_verify() == 1
    assert "ledger drift in 1 account(s)" in caplog.text

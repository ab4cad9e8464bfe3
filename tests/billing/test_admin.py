import pytest

from accounts import services as account_services
from billing import selectors
from billing.models import AccountPlan, Plan, Transfer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("mid_august")]


@pytest.fixture
def admin_client(client, db):
    admin = account_services.user_create(email="root@example.com", password="correct horse battery staple")
    admin.is_staff = admin.is_superuser = True
    admin.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(admin)
    return client


@pytest.fixture
def charged(owner, charge):
    charge(owner)
    return owner


def test_ledger_pages_filter_by_account_and_period_and_offer_no_edits(admin_client, charged):
    transfers = admin_client.get(f"/admin/billing/transfer/?debit_account__user__id__exact={charged.pk}")
    accounts = admin_client.get("/admin/billing/ledgeraccount/?period_start__year=2026&period_start__month=8")
    detail = admin_client.get(f"/admin/billing/transfer/{Transfer.objects.first().pk}/change/")

    assert transfers.status_code == accounts.status_code == detail.status_code == 200
    assert transfers.context["cl"].result_count == Transfer.objects.count()
    assert accounts.context["cl"].result_count == 11  # 4 lookup, 4 credit and 3 free-optimization accounts
    assert b'name="_save"' not in detail.content
    assert admin_client.get("/admin/billing/transfer/add/").status_code == 403
    assert admin_client.post(f"/admin/billing/transfer/{Transfer.objects.first().pk}/delete/").status_code == 403


def test_assigning_a_plan_in_admin_posts_the_upgrade_grant(admin_client, charged):
    pro = Plan.objects.get(code="pro")

    response = admin_client.post("/admin/billing/accountplan/add/", {"user": charged.pk, "plan": pro.pk})

    assert response.status_code == 302
    assert AccountPlan.objects.get(user=charged).plan == pro
    assert selectors.lookup_usage(user=charged)["included_lookups"] == 2000


def test_admin_posts_a_correcting_transfer_only_with_a_reason(admin_client, charged):
    original = Transfer.objects.get(code="charge")
    selected = {"action": "reverse_transfers", "_selected_action": [original.pk]}

    form = admin_client.post("/admin/billing/transfer/", selected)
    without_reason = admin_client.post("/admin/billing/transfer/", {**selected, "confirm": "1", "reason": " "})
    done = admin_client.post("/admin/billing/transfer/", {**selected, "confirm": "1", "reason": "refund"})

    assert form.status_code == without_reason.status_code == 200
    assert b"A correction needs a reason." in without_reason.content
    assert done.status_code == 302
    reversal = Transfer.objects.get(code="adjust")
    assert (reversal.reverses_id, reversal.reason, reversal.created_by.email) == (
        original.pk,
        "refund",
        "root@example.com",
    )
    assert selectors.lookup_usage(user=charged)["used_lookups"] == 0

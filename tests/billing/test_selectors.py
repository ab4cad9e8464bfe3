from billing import selectors
from billing.models import AccountPlan, Plan
from leroy.clock import now

BOUNDARY = {"broker_write_authority": "none", "paper_trading": False, "live_order": False}


def test_usage_report_reads_an_opened_month_in_two_queries(owner, charge, django_assert_num_queries) -> None:
    charge(owner, units=3)

    with django_assert_num_queries(2):  # the period, its lookup accounts
        report = selectors.usage_report(user=owner)

    assert report == {
        "period_start": now().date().replace(day=1).isoformat(),
        "included_lookups": 100,
        "used_lookups": 3,
        "lookups_remaining": 97,
        "overage_lookups": 0,
        "overage_amount_usd": 0.0,
        "overage_rate_usd": 0.01,
        "billing_status": "ledgered",
        "research_boundary": BOUNDARY,
    }


def test_usage_report_of_an_unopened_month_reads_the_plan_once(owner, django_assert_num_queries) -> None:
    AccountPlan.objects.filter(user=owner).delete()

    with django_assert_num_queries(3):  # the period (none yet), the plan assignment (none), the default plan
        report = selectors.usage_report(user=owner)

    default = Plan.objects.get(is_default=True)
    assert report["used_lookups"] == 0
    assert report["lookups_remaining"] == report["included_lookups"] == default.included_lookups
    assert report["overage_rate_usd"] == default.overage_micros_per_lookup / 1_000_000

from billing import selectors
from billing.models import AccountPlan, Plan
from leroy.clock import now


def test_usage_report_reads_an_opened_month_in_two_queries(owner, charge, django_assert_num_queries) -> None:
    charge(owner, units=3)

    with django_assert_num_queries(2):  # the period, its lookup accounts
        report = selectors.usage_report(user=owner)

    assert report["period_start"] == now().date().replace(day=1).isoformat()
    figures = ("included_lookups", "used_lookups", "lookups_remaining", "overage_lookups", "overage_rate_usd")
    assert [report[name] for name in figures] == [100, 3, 97, 0, 0.01]


def test_usage_report_of_an_unopened_month_reads_the_plan_once(owner, django_assert_num_queries) -> None:
    AccountPlan.objects.filter(user=owner).delete()

    with django_assert_num_queries(3):  # the period (none yet), the plan assignment (none), the default plan
        report = selectors.usage_report(user=owner)

    default = Plan.objects.get(is_default=True)
    assert report["used_lookups"] == 0
    assert report["lookups_remaining"] == report["included_lookups"] == default.included_lookups
    assert report["overage_rate_usd"] == default.overage_micros_per_lookup / 1_000_000

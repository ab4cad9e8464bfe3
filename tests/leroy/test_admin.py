import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.urls import reverse

from accounts.models import User

PROJECT_APPS = ("accounts", "billing", "evidence", "backtests", "alerts")


def project_models() -> list:
    return [model for model in apps.get_models() if model._meta.app_label in PROJECT_APPS]


def test_every_project_model_has_an_admin():
    assert [m._meta.label for m in project_models() if m not in admin.site._registry] == []


def test_no_admin_plural_is_a_bare_s_after_a_word_that_needs_another_ending():
    # "research hypothesiss", "strategys", "deliverys": Django's default plural is verbose_name + "s".
    naive = [
        f"{m._meta.label}: {m._meta.verbose_name_plural}"
        for m in project_models()
        if re.search(r"(s|x|sh|ch|[^aeiou]y)$", str(m._meta.verbose_name))
        and m._meta.verbose_name_plural == f"{m._meta.verbose_name}s"
    ]
    assert naive == []


@pytest.mark.parametrize("model", project_models(), ids=lambda m: m._meta.label)
def test_every_admin_changelist_opens_for_staff(client, db, model):
    client.force_login(User.objects.create_superuser(email="admin@example.com", password="x-long-password"))

    response = client.get(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))

    assert response.status_code == 200


@pytest.mark.parametrize("model", project_models(), ids=lambda m: m._meta.label)
def test_an_empty_admin_add_form_is_refused_or_saved_never_a_server_error(client, db, model):
    # The build's records (bar partitions, builds, artifacts) showed every field read-only yet offered Add: saving
    # the empty form failed the database's NOT NULL constraints with a 500.
    client.force_login(User.objects.create_superuser(email="admin@example.com", password="x-long-password"))
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_add")
    before = model.objects.count()

    opened, posted = client.get(url), client.post(url, {})

    if not admin.site._registry[model].has_add_permission(opened.wsgi_request):
        assert (opened.status_code, posted.status_code) == (403, 403)
        assert model.objects.count() == before
    else:
        assert opened.status_code == 200
        assert posted.status_code == 200  # the form again, with what is missing
        assert model.objects.count() == before


def test_report_admin_shows_statistics_as_a_table_and_strategies_are_plural(client, db):
    from datetime import UTC, date, datetime

    from backtests.models import Report, Status, Strategy

    staff = User.objects.create_superuser(email="admin@example.com", password="x-long-password")
    client.force_login(staff)
    at = datetime(2026, 11, 2, tzinfo=UTC)
    strategy = Strategy.objects.create(user=staff, name="S", code="x", code_sha256="a" * 64, created_at=at)
    report = Report.objects.create(
        user=staff,
        strategy=strategy,
        status=Status.COMPLETED,
        data_ids=["SPY"],
        tickers=["SPY"],
        frequency="1d",
        start_date=date(2026, 1, 2),
        end_date=date(2026, 2, 2),
        simulation={},
        statistics={"total_return": 0.125, "profit_factor": None},
        created_at=at,
    )

    page = client.get(reverse("admin:backtests_report_change", args=[report.pk])).content.decode()
    index = client.get(reverse("admin:index")).content.decode()

    assert "<tr><th>Total return</th><td>0.1250</td></tr>" in page
    assert "<tr><th>Profit factor</th><td>—</td></tr>" in page
    assert '"total_return"' not in page  # not the raw JSON
    assert "Strategies" in index and "Strategys" not in index


def test_optimization_run_admin_shows_the_days_its_packed_returns_cover(client, db):
    from datetime import UTC, datetime

    from backtests import series
    from backtests.models import Optimization, OptimizationRun, Strategy

    staff = User.objects.create_superuser(email="admin@example.com", password="x-long-password")
    client.force_login(staff)
    at = datetime(2026, 11, 2, tzinfo=UTC)
    strategy = Strategy.objects.create(user=staff, name="S", code="x", code_sha256="a" * 64, created_at=at)
    optimization = Optimization.objects.create(
        user=staff, strategy=strategy, name="grid", data_ids=["SPY"], tickers=["SPY"], frequency="1d",
        start_date=datetime(2026, 1, 2, tzinfo=UTC), end_date=datetime(2026, 2, 2, tzinfo=UTC), grids=[],
        parameters={}, simulation_parameters={},
        target_metric="sharpe", target_direction="maximize", total_iterations=2, created_at=at,
    )  # fmt: skip
    kept = [["2026-01-02", 0.01], ["2026-01-05", -0.02], ["2026-01-06", 0.0]]
    runs = OptimizationRun.objects
    run = runs.create(optimization=optimization, iteration=1, parameters={}, returns=series.pack(kept))
    empty = runs.create(optimization=optimization, iteration=2, parameters={})

    page = client.get(reverse("admin:backtests_optimizationrun_change", args=[run.pk])).content.decode()
    none = client.get(reverse("admin:backtests_optimizationrun_change", args=[empty.pk])).content.decode()

    assert '<div class="readonly">3 days, 2026-01-02 to 2026-01-06</div>' in page
    assert '<div class="readonly">none kept</div>' in none


def test_ledger_admin_is_read_only(client, db):
    from billing.models import LedgerAccount, Transfer

    client.force_login(User.objects.create_superuser(email="admin@example.com", password="x-long-password"))

    for model in (LedgerAccount, Transfer):
        opts = model._meta
        assert client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403


@pytest.mark.parametrize(
    ("method", "path", "data", "in_range"),
    [
        ("post", "admin:accounts_user_changelist", {"action": "delete_selected", "_selected_action": ["abc"]}, True),
        (
            "post",
            "admin:accounts_user_changelist",
            {"action": "delete_selected", "_selected_action": ["9" * 20]},
            False,
        ),
        ("post", "admin:billing_accountplan_add", {"user": "abc"}, True),
        ("get", "admin:accounts_user_changelist", {"pk__in": "9" * 20}, False),
    ],
    ids=["action-not-an-id", "action-id-out-of-range", "autocomplete-not-an-id", "lookup-out-of-range"],
)
def test_a_value_the_admin_does_not_check_is_a_bad_request_and_changes_nothing(
    client, db, method, path, data, in_range
):
    # Django's admin queries with these unchecked: each was a 500 (the ids out of range on SQLite only, which cannot
    # bind them; PostgreSQL's backend drops them from the lookup and the page answers for no row).
    staff = User.objects.create_superuser(email="admin@example.com", password="x-long-password")
    client.force_login(staff)
    client.raise_request_exception = False

    response = getattr(client, method)(reverse(path), data)

    assert response.status_code == (400 if in_range or connection.vendor == "sqlite" else 200)
    assert list(User.objects.values_list("pk", flat=True)) == [staff.pk]

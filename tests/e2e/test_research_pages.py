"""Strategies, a report with its equity and drawdown chart, an optimization heat map, the journal; every page
of the navigation bar opens with a CSP and no console error, on a phone and a desktop."""

from datetime import UTC, date, datetime

import pytest
from playwright.sync_api import Page

from accounts.models import User
from backtests.models import Optimization, OptimizationRun, Report, Status, Strategy
from backtests.statistics import METRICS
from evidence.models import ResearchHypothesis
from tests.e2e.conftest import log_in

AT = datetime(2026, 11, 2, 15, 0, tzinfo=UTC)
CURVE = [["2026-01-02T00:00:00Z", 10_000.0], ["2026-01-05T00:00:00Z", 10_250.5], ["2026-01-06T00:00:00Z", 9_800.0]]
CURVE += [[f"2026-02-{d:02d}T00:00:00Z", 9_800.0 + 37.5 * d] for d in range(1, 28)]


@pytest.fixture
def research(alice: User) -> dict[str, object]:
    first = Strategy.objects.create(
        user=alice, name="SMA cross", code="class S: pass", code_sha256="a" * 64, created_at=AT, is_current=False
    )
    current = Strategy.objects.create(
        user=alice,
        name="SMA cross",
        code="class S: x = 1",
        code_sha256="b" * 64,
        created_at=AT,
        lineage=first.lineage,
        previous=first,
        revision=2,
        version="1.1.0",
    )
    statistics = dict.fromkeys(METRICS, 0.5) | {"total_return": 0.1425, "profit_factor": None}
    trades = [
        {
            "symbol": "SPY",
            "side": "long",
            "entry_time": f"2026-01-{1 + i % 28:02d}T15:00:00Z",
            "exit_time": f"2026-01-{1 + i % 28:02d}T16:00:00Z",
            "entry_price": 500.0 + i,
            "exit_price": 501.0 + i,
            "quantity": 10.0,
            "gross_pnl": 10.0,
            "pnl_percentage": 0.2,
            "total": 9.5 + i,
            "bars_held": 60,
        }
        for i in range(30)
    ]
    report = Report.objects.create(
        user=alice,
        strategy=current,
        status=Status.COMPLETED,
        data_ids=["SPY"],
        tickers=["SPY"],
        frequency="1d",
        start_date=date(2026, 1, 2),
        end_date=date(2026, 2, 27),
        simulation={"initial_cash": 10_000},
        statistics=statistics,
        trades=trades,
        equity=CURVE,
        created_at=AT,
        finished_at=AT,
    )
    optimization = Optimization.objects.create(
        user=alice,
        strategy=current,
        name="fast and slow",
        status=Status.COMPLETED,
        data_ids=["SPY"],
        tickers=["SPY"],
        frequency="1d",
        start_date=AT,
        end_date=AT,
        grids=[{"name": "fast", "min": 3, "max": 4, "step": 1}, {"name": "slow", "min": 10, "max": 12, "step": 2}],
        simulation_parameters={},
        target_metric="total_return",
        target_direction="maximize",
        total_iterations=4,
        completed_iterations=4,
        created_at=AT,
    )
    grid = [(3, 10, 0.01), (3, 12, 0.04), (4, 10, -0.02), (4, 12, 0.09)]
    for i, (fast, slow, value) in enumerate(grid):
        OptimizationRun.objects.create(
            optimization=optimization,
            iteration=i,
            parameters={"fast": fast, "slow": slow},
            status=Status.COMPLETED,
            statistics={"total_return": value},
        )
    ResearchHypothesis.objects.create(
        user=alice,
        number=1,
        symbol="SPY",
        side="buy",
        horizon_minutes=30,
        note="Gap fill after a weak open",
        recorded_at=AT,
        reviewed_at=AT,
        outcome={"outcome_status": "realized", "realized_return_pct": 0.4125, "reason": None},
    )
    return {"report": report, "optimization": optimization, "strategy": current}


def test_report_page_draws_exactly_the_reports_equity_curve(person: Page, origin: str, research, shoot):
    log_in(person, origin, "alice@example.com")
    person.get_by_role("link", name="Strategies").click()
    assert "version 1.1.0" not in person.content()  # the list shows "1.1.0 (revision 2)"
    assert "1.1.0 (revision 2)" in person.locator("#strategies").inner_text()
    person.get_by_role("link", name="SMA cross").click()
    assert person.locator("#versions tbody tr").count() == 2
    person.locator("#reports a").first.click()

    chart = person.locator("#equity-chart")
    low, high = float(chart.get_attribute("data-low") or "nan"), float(chart.get_attribute("data-high") or "nan")
    points = [
        tuple(map(float, p.split(","))) for p in (chart.locator("polyline").get_attribute("points") or "").split()
    ]
    assert len(points) == len(CURVE)
    # Invert the drawing: each vertex's height is the curve's value (to the 2-decimal precision drawn).
    top, bottom = 36.0, 220.0 - 36.0
    drawn = [high - (y - top) / (bottom - top) * (high - low) for _, y in points]
    assert drawn == pytest.approx([value for _, value in CURVE], abs=(high - low) / (bottom - top) * 0.01)
    assert [x for x, _ in points] == sorted(x for x, _ in points)
    assert (low, high) == (9_800.0, 10_812.5)
    drawdown = person.locator("#drawdown-chart")
    assert float(drawdown.get_attribute("data-low") or "nan") == pytest.approx((9_800.0 / 10_250.5 - 1) * 100)
    stats = person.locator("#statistics").inner_text()
    assert "Total return\n0.1425" in stats
    assert "Profit factor\n—" in stats
    assert person.locator("#trades tbody tr").count() == 25
    shoot("report")
    person.get_by_role("link", name="Next").click()
    assert person.locator("#trades tbody tr").count() == 5
    assert "Page 2 of 2 (30 trades)" in person.locator("#trades-pager").inner_text()


def test_optimization_page_has_results_and_a_heat_map_of_the_target(person: Page, origin: str, research, shoot):
    log_in(person, origin, "alice@example.com")
    person.get_by_role("link", name="Strategies").click()
    person.get_by_role("link", name="fast and slow").click()

    rows = person.locator("#results tbody tr")
    assert [rows.nth(i).locator("td").nth(3).inner_text() for i in range(4)] == [
        "0.0900",
        "0.0400",
        "0.0100",
        "-0.0200",
    ]
    cells = person.locator("#heat-map rect")
    drawn = {
        (cells.nth(i).get_attribute("data-column"), cells.nth(i).get_attribute("data-row")): (
            cells.nth(i).get_attribute("data-value"),
            cells.nth(i).get_attribute("class"),
        )
        for i in range(cells.count())
    }
    assert drawn == {
        ("3", "10"): ("0.01", "shade-1"),
        ("3", "12"): ("0.04", "shade-2"),
        ("4", "10"): ("-0.02", "shade-0"),
        ("4", "12"): ("0.09", "shade-4"),
    }
    shoot("optimization")


def test_every_page_of_the_navigation_bar_opens_cleanly(person: Page, origin: str, research, shoot):
    log_in(person, origin, "alice@example.com")
    names = ["Keys", "Connected clients", "Usage", "Plan and billing", "Strategies", "Journal", "Alerts"]
    names += ["Publication log"]
    nav = person.get_by_role("navigation", name="Main")
    for name in names:
        response_url = person.url
        nav.get_by_role("link", name=name).click()
        person.wait_for_load_state()
        assert person.url != response_url or name == "Keys"
        assert nav.get_by_role("link", name=name).get_attribute("aria-current") == "page"
        assert person.locator("h1").count() == 1
        shoot(name)
    person.get_by_role("link", name="Journal").click()
    assert "Gap fill after a weak open" in person.locator("#journal").inner_text()
    assert "realized: 0.413 %" in person.locator("#journal").inner_text()
    person.get_by_role("button", name="Log out").click()
    person.wait_for_url(origin + "/")
    assert person.get_by_role("navigation", name="Main").get_by_role("link", name="Log in").count() == 1


def test_account_pages_are_never_cached_not_frameable_and_every_form_carries_csrf(
    person: Page, origin: str, alice: User
):
    log_in(person, origin, "alice@example.com")

    pages = ["/account/", "/account/clients/", "/account/usage/", "/account/billing/", "/account/journal/"]
    for path in [*pages, "/account/alerts/"]:
        response = person.goto(origin + path)

        assert response is not None and response.status == 200
        headers = response.headers
        assert "no-store" in headers["cache-control"], path
        assert headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert "'unsafe-inline'" not in headers["content-security-policy"]
        forms = person.locator("form[method=post]")
        assert forms.count() >= 1
        for i in range(forms.count()):
            assert forms.nth(i).locator("input[name=csrfmiddlewaretoken]").count() == 1, path

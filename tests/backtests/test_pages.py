"""The report page states the look-ahead probe's verdict as the report records it."""

from datetime import UTC, date, datetime

import pytest

from backtests.models import Report, Status, Strategy

pytestmark = pytest.mark.django_db
AT = datetime(2026, 3, 2, 15, 0, tzinfo=UTC)
CUT = "2026-02-02T00:00:00Z"


def report_of(user, check):
    strategy = Strategy.objects.create(user=user, name="S", code="class S: pass", code_sha256="a" * 64, created_at=AT)
    return Report.objects.create(
        user=user, strategy=strategy, status=Status.COMPLETED, data_ids=["SPY"], tickers=["SPY"], frequency="1d",
        start_date=date(2026, 1, 2), end_date=date(2026, 2, 27), simulation={"initial_cash": 10_000},
        statistics={}, trades=[], equity=[], created_at=AT, finished_at=AT, lookahead_check=check,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("check", "shown"),
    [
        (None, "pending"),
        (
            {"status": "passed", "method": "streamed", "k": 0, "cuts": [], "decisions_checked": 12},
            "passed</span>: rerun with each bar given only after its step on the one before, all 12 order decisions "
            "equal the full run's",
        ),
        (
            {"status": "passed", "method": "cuts", "k": 3, "cuts": [CUT]},
            "passed</span>: the order decisions before each of 3 cuts",
        ),
        ({"status": "failed", "k": 3, "cuts": [CUT]}, "failed</span>: the strategy decided differently"),
        ({"status": "not_run", "k": 3, "cuts": [], "reason": "only 30 bars"}, "not run</span>: only 30 bars"),
    ],
)
def test_the_report_page_states_the_lookahead_verdict(client, owner, check, shown):
    report = report_of(owner, check)
    client.force_login(owner)

    page = client.get(f"/account/reports/{report.pk}/")

    assert page.status_code == 200
    assert shown in page.content.decode()
    assert "not computed" not in page.content.decode()


def test_the_report_page_shows_the_verdict_beside_the_statistics(client, owner):
    from backtests import verdicts

    report = report_of(owner, {"status": "passed", "k": 3, "cuts": [CUT]})
    deflated = verdicts.deflated_sharpe([0.01, -0.005, 0.002, 0.004, -0.001], trials=7, trial_sharpe_variance=0.02)
    report.verdict = verdicts.verdict(
        deflated=deflated, pbo=None, pbo_refusal=None, lookahead="passed", trades=4,
        thresholds=verdicts.Thresholds(min_deflated_sharpe=0.95, max_pbo=0.5, min_trades=30),
    )  # fmt: skip
    report.save(update_fields=["verdict"])
    client.force_login(owner)

    page = client.get(f"/account/reports/{report.pk}/").content.decode()

    assert page.index('id="statistics"') < page.index('id="verdict"') < page.index("<h2>Trades</h2>")
    assert '<span class="badge" id="verdict-status">insufficient_evidence</span>' in page
    assert "<code>trades</code> 4 trades, fewer than the 30 required (LEROY_VERDICT_MIN_TRADES)." in page
    assert "<dt>Trials</dt><dd>7</dd>" in page
    assert "not investment advice" in page
    assert "LEROY_VERDICT_MAX_PBO = 0.5" in page


def test_the_report_page_names_its_figures_in_words_and_keeps_small_values(client, owner):
    report = report_of(owner, {"status": "passed", "k": 3, "cuts": [CUT]})
    report.statistics = {"total_return": -5.38e-05, "cagr": 0.123456789, "realized_pnl": 12.5}
    report.diagnostics = {"sandbox_layers": ["ast"], "bars": {"ALFA": 2356, "BRVO": 2355}}
    report.save(update_fields=["statistics", "diagnostics"])
    client.force_login(owner)

    page = client.get(f"/account/reports/{report.pk}/").content.decode()

    assert "<dt>Total return</dt><dd>-5.38e-05</dd>" in page
    assert "<dt>CAGR</dt><dd>0.123457</dd>" in page
    assert "<dt>Realized P&amp;L</dt><dd>12.5</dd>" in page
    assert "<dt>Bars</dt><dd>ALFA 2356, BRVO 2355</dd>" in page


def test_the_strategies_list_shows_the_reports_of_earlier_revisions_as_the_strategy_page_does(client, owner):
    report = report_of(owner, None)
    first = report.strategy
    Strategy.objects.filter(pk=first.pk).update(is_current=False)
    Strategy.objects.create(
        user=owner, name="S", code="class S: pass", code_sha256="b" * 64, created_at=AT, lineage=first.lineage,
        revision=2,
    )  # fmt: skip
    client.force_login(owner)

    page = client.get("/account/strategies/").content.decode()

    assert f'href="/account/reports/{report.pk}/"' in page
    assert "revision 2" in page

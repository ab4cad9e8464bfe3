import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from evidence.marketdata import providers
from evidence.marketdata.selectors import bars_read
from evidence.models import BarPartition, Symbol

pytestmark = pytest.mark.django_db


def adjusted(row: dict, factor: float) -> dict:
    """A daily row as Tiingo sends it: raw prices and, beside them, the prices adjusted by `factor`."""
    prices = {f"adj{k.title()}": row[k] * factor for k in ("open", "high", "low", "close")}
    return {**row, **prices, "adjVolume": row["volume"] / factor}


DAILY = [
    adjusted({"date": f"2024-01-0{d}T00:00:00.000Z", "open": 10.0 + d, "high": 12.0 + d, "low": 9.0 + d,
              "close": 11.0 + d, "volume": 1000 * d}, 1.0)
    for d in (2, 3, 4)
]  # fmt: skip
# 2024-01-04 is missing, and 2024-01-05 opens at about half the close of 2024-01-03, its adjusted prices too: a 2:1
# split the provider did not adjust for
SPLIT = [
    adjusted({"date": f"2024-01-0{d}T00:00:00.000Z", "open": o, "high": max(o, c), "low": min(o, c), "close": c,
              "volume": 1000}, 1.0)
    for d, o, c in ((2, 198.0, 201.0), (3, 201.0, 200.4), (5, 100.2, 103.1), (8, 103.1, 99.0))
]  # fmt: skip
# A 4:1 split before the 2024-01-05 session, adjusted by the provider: raw prices fall to a quarter, adjusted ones not
FOUR_FOR_ONE = [
    adjusted({"date": f"2024-01-0{d}T00:00:00.000Z", "open": o, "high": max(o, c), "low": min(o, c), "close": c,
              "volume": 1000}, factor)
    for d, o, c, factor in ((2, 400.0, 404.0, 0.25), (3, 404.0, 408.0, 0.25), (4, 408.0, 400.0, 0.25),
                            (5, 100.5, 102.0, 1.0))
]  # fmt: skip
RAW_ONLY = [{key: value for key, value in row.items() if not key.startswith("adj")} for row in DAILY]
HOLIDAY = [dict(DAILY[0], date="2024-01-01T00:00:00.000Z"), *DAILY]  # New Year's Day: no XNYS session
FX = [
    {"date": f"2024-01-02T0{h}:00:00.000Z", "ticker": "xauusd", "open": 2000.0 + h, "high": 2001.0 + h,
     "low": 1999.0 + h, "close": 2000.5 + h}
    for h in range(4)
]  # fmt: skip


class FakeTiingo(BaseHTTPRequestHandler):
    requests: list[tuple[str, dict, str]] = []
    status = 200

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        FakeTiingo.requests.append((url.path, query, self.headers.get("Authorization", "")))
        body = {
            "/tiingo/daily/aapl/prices": DAILY,
            "/tiingo/daily/splt/prices": SPLIT,
            "/tiingo/daily/four/prices": FOUR_FOR_ONE,
            "/tiingo/daily/rawo/prices": RAW_ONLY,
            "/tiingo/daily/hldy/prices": HOLIDAY,
            "/tiingo/fx/xauusd/prices": FX,
            "/tiingo/crypto/prices": [{"ticker": "btcusd", "priceData": [dict(r, volume=5.0) for r in FX]}],
        }.get(url.path)
        status = FakeTiingo.status if body is not None else 404
        payload = json.dumps(body if status == 200 else {"detail": "no"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def tiingo(settings):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeTiingo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeTiingo.requests, FakeTiingo.status = [], 200
    settings.LEROY_MARKET_DATA_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.LEROY_MARKET_DATA_TOKEN = "test-token"
    yield FakeTiingo
    server.shutdown()
    server.server_close()


def test_equity_daily_history_is_downloaded_into_the_bar_store_and_then_reused(tiingo):
    first = providers.market_data_download(symbol=" aapl ", frequency="1d", asset_class="equity")
    second = providers.market_data_download(symbol="AAPL", frequency="1d", asset_class="equity")

    symbol = Symbol.objects.get(ticker="AAPL")
    assert first == {
        "symbol_id": str(symbol.pk), "symbol": "AAPL", "name": "AAPL", "reused": False, "frequency": "1d", "rows": 3,
        "first_timestamp": "2024-01-02T00:00:00Z", "last_timestamp": "2024-01-04T00:00:00Z",
        "gaps": {"checked": True, "first_session": "2024-01-02", "last_session": "2024-01-04", "sessions_expected": 3,
                 "sessions_missing": [], "sessions_with_gaps": [], "missing_bars": 0},
        "warnings": [], "warnings_total": 0,
    }  # fmt: skip
    assert second == {"symbol_id": str(symbol.pk), "symbol": "AAPL", "name": "AAPL", "reused": True}
    assert tiingo.requests == [("/tiingo/daily/aapl/prices", {"startDate": "1900-01-01"}, "Token test-token")]
    assert symbol.frequencies == ["1d"]


def test_download_reports_the_gaps_and_split_warnings_a_file_import_reports(tiingo):
    result = providers.market_data_download(symbol="SPLT", frequency="1d", asset_class="equity")

    assert (result["rows"], result["reused"]) == (4, False)
    assert result["gaps"] == {
        "checked": True, "first_session": "2024-01-02", "last_session": "2024-01-08", "sessions_expected": 5,
        "sessions_missing": ["2024-01-04"], "sessions_with_gaps": [], "missing_bars": 1,
    }  # fmt: skip
    assert result["warnings"] == [
        "SPLT 2024-01-05: opened at 100.2, -50.0% from the close of 200.4 on 2024-01-03, within 1.5% of a 2:1 "
        "split's open: possibly an unadjusted split, possibly a real move; check that the bars are split-adjusted"
    ]
    assert result["warnings_total"] == 1
    assert BarPartition.objects.get(symbol__ticker="SPLT").row_count == 4


def test_a_stock_is_stored_at_its_adjusted_prices_so_a_split_is_no_crash(tiingo):
    result = providers.market_data_download(symbol="FOUR", frequency="1d", asset_class="equity")

    stored = bars_read(symbol=Symbol.objects.get(ticker="FOUR"), frequency="1d")
    assert stored.get_column("close").to_list() == [101.0, 102.0, 100.0, 102.0]
    assert stored.get_column("open").to_list() == [100.0, 101.0, 102.0, 100.5]
    assert stored.get_column("volume").to_list() == [4000.0, 4000.0, 4000.0, 1000.0]
    assert (result["rows"], result["warnings"], result["warnings_total"]) == (4, [], 0)


def test_a_stock_without_adjusted_prices_is_refused_and_nothing_is_stored(tiingo, data_dir):
    with pytest.raises(providers.DownloadError) as caught:
        providers.market_data_download(symbol="RAWO", frequency="1d", asset_class="equity")

    assert caught.value.code == "provider_error"
    assert str(caught.value) == (
        "The provider's daily bars carry no split- and dividend-adjusted prices; raw prices would show every split "
        "as a crash, so nothing was stored."
    )
    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False
    assert [path for path in data_dir.rglob("*") if path.is_file()] == []


def test_bars_the_importer_refuses_store_nothing(tiingo, data_dir):
    with pytest.raises(providers.DownloadError) as caught:
        providers.market_data_download(symbol="HLDY", frequency="1d", asset_class="equity")

    assert caught.value.code == "import_rejected"
    assert str(caught.value) == "1 daily bars fall on days that are not XNYS sessions"
    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False
    assert [path for path in data_dir.rglob("*") if path.is_file()] == []


def test_metal_pair_is_stored_compact_and_named_as_a_pair(tiingo):
    result = providers.market_data_download(symbol="XAU/USD", frequency="1h", asset_class="forex")

    symbol = Symbol.objects.get(ticker="XAUUSD")
    assert (result["symbol"], result["name"], result["rows"]) == ("XAUUSD", "XAU/USD", 4)
    assert (symbol.asset_class, symbol.currency, symbol.frequencies) == ("forex", "USD", ["1h"])
    assert tiingo.requests[0][1] == {"startDate": "1900-01-01", "resampleFreq": "1hour"}


def test_crypto_pair_reads_the_price_data_of_the_answer(tiingo):
    result = providers.market_data_download(symbol="BTC-USD", frequency="1h", asset_class="crypto")

    assert (result["symbol"], result["rows"]) == ("BTCUSD", 4)
    assert tiingo.requests[0][:2] == (
        "/tiingo/crypto/prices",
        {"startDate": "1900-01-01", "tickers": "btcusd", "resampleFreq": "1hour"},
    )


@pytest.mark.parametrize(
    ("status", "symbol", "code"), [(500, "AAPL", "provider_error"), (200, "MSFT", "symbol_unknown")]
)
def test_provider_failures_store_nothing(tiingo, status, symbol, code):
    tiingo.status = status

    with pytest.raises(providers.DownloadError) as caught:
        providers.market_data_download(symbol=symbol, frequency="1d", asset_class="equity")

    assert caught.value.code == code
    assert Symbol.objects.exists() is False
    assert BarPartition.objects.exists() is False


def test_unconfigured_provider_and_bad_symbols_are_refused_before_any_request(settings):
    settings.LEROY_MARKET_DATA_TOKEN = ""

    with pytest.raises(providers.DownloadError) as unconfigured:
        providers.market_data_download(symbol="AAPL", frequency="1d", asset_class="equity")
    with pytest.raises(providers.DownloadError) as not_a_pair:
        providers.market_data_download(symbol="GOLD", frequency="1h", asset_class="forex")

    assert unconfigured.value.code == "provider_not_configured"
    assert not_a_pair.value.code == "invalid_symbol"


def test_downloaded_and_reused_results_fit_the_tool_output_model(tiingo):
    from backtests.schemas import DownloadOut

    first = providers.market_data_download(symbol="XAU/USD", frequency="1h", asset_class="forex")
    second = providers.market_data_download(symbol="XAUUSD", frequency="1h", asset_class="forex")
    warned = providers.market_data_download(symbol="SPLT", frequency="1d", asset_class="equity")

    assert DownloadOut.model_validate(first).model_dump(mode="json") == first
    assert DownloadOut.model_validate(second).model_dump(mode="json") == second | dict.fromkeys(
        ("frequency", "rows", "first_timestamp", "last_timestamp", "gaps", "warnings", "warnings_total")
    )
    assert DownloadOut.model_validate(warned).model_dump(mode="json") == warned
    assert first["gaps"] == {
        "checked": False, "first_session": "", "last_session": "", "sessions_expected": 0, "sessions_missing": [],
        "sessions_with_gaps": [], "missing_bars": 0,
    }  # fmt: skip

"""Market-data download providers feeding the one bar store (`evidence.marketdata.importers.bars_import`).

The HTTP provider speaks Tiingo's REST API (daily equity prices, FX and crypto with `resampleFreq`); its base
URL and token come from settings, so tests point it at a local fake server. Files are imported with
evidence's `manage.py import_bars`, which shares the same validation.
"""

import re
from datetime import UTC, date, datetime
from typing import Any, Protocol

import httpx2
import polars as pl
from django.conf import settings

from evidence.marketdata.importers import ImportRejected, bars_import
from evidence.models import Symbol
from evidence.vocabulary import normalize_ticker
from leroy.errors import DomainError

RESAMPLE = {"5m": "5min", "15m": "15min", "1h": "1hour", "4h": "4hour", "1d": "1day"}
PAIR = re.compile(r"^([A-Z0-9]{2,10})[/\-_ ]?(USD|EUR|GBP|JPY|CHF|AUD|CAD|NZD|USDT|USDC|BTC|ETH)$")


class DownloadError(DomainError):
    """The provider could not deliver; nothing was stored."""


class Provider(Protocol):
    def fetch(self, *, ticker: str, frequency: str, asset_class: str) -> pl.DataFrame:
        """Full-history bars as a frame with ts (aware UTC), open, high, low, close, volume."""
        ...


PRICES = ("open", "high", "low", "close")
# A stock's daily prices as the provider adjusts them for splits and dividends (CRSP's method): its raw prices would
# show every split as a crash (a 4:1 split as -75 %) to a strategy holding through it, and no dividend at all.
ADJUSTED = {"open": "adjOpen", "high": "adjHigh", "low": "adjLow", "close": "adjClose", "volume": "adjVolume"}


def _frame(rows: list[dict[str, Any]], *, adjusted: bool = False) -> pl.DataFrame:
    field = ADJUSTED if adjusted else {name: name for name in (*PRICES, "volume")}
    return pl.DataFrame(
        {
            "ts": [datetime.fromisoformat(r["date"].replace("Z", "+00:00")).astimezone(UTC) for r in rows],
            **{k: [float(r[field[k]]) for r in rows] for k in PRICES},
            "volume": [float(r.get(field["volume"]) or 0.0) for r in rows],
        },
        schema={
            "ts": pl.Datetime("us", "UTC"),
            **dict.fromkeys(("open", "high", "low", "close", "volume"), pl.Float64),
        },
    )


class TiingoProvider:
    """Tiingo-compatible REST endpoints: /tiingo/daily (stored split- and dividend-adjusted), /tiingo/fx and
    /tiingo/crypto."""

    def __init__(self, *, base_url: str, token: str, timeout: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        headers = {"Authorization": f"Token {self.token}", "Accept": "application/json"}
        try:
            response = httpx2.get(
                f"{self.base_url}{path}", params=params, headers=headers, timeout=self.timeout, follow_redirects=False
            )
        except httpx2.HTTPError as error:
            raise DownloadError("provider_unavailable", f"The market-data provider did not answer: {error}") from None
        if response.status_code == 404:
            raise DownloadError("symbol_unknown", "The provider does not know this symbol.")
        if response.status_code != 200:
            raise DownloadError(
                "provider_error", f"The provider answered HTTP {response.status_code}.", status=response.status_code
            )
        try:
            return response.json()
        except ValueError:
            raise DownloadError("provider_error", "The provider's answer was not JSON.") from None

    def fetch(self, *, ticker: str, frequency: str, asset_class: str) -> pl.DataFrame:
        start = {"startDate": "1900-01-01"}
        if asset_class in ("equity", "etf"):
            rows = self._get(f"/tiingo/daily/{ticker.lower()}/prices", start)
        elif asset_class == "forex":
            rows = self._get(f"/tiingo/fx/{ticker.lower()}/prices", start | {"resampleFreq": RESAMPLE[frequency]})
        else:
            answer = self._get(
                "/tiingo/crypto/prices", start | {"tickers": ticker.lower(), "resampleFreq": RESAMPLE[frequency]}
            )
            rows = answer[0]["priceData"] if answer else []
        if not isinstance(rows, list):
            raise DownloadError("provider_error", "The provider's answer was not a list of bars.")
        adjusted = asset_class in ("equity", "etf")
        if adjusted and not all(isinstance(r, dict) and r.get(ADJUSTED["close"]) is not None for r in rows):
            raise DownloadError(
                "provider_error",
                "The provider's daily bars carry no split- and dividend-adjusted prices; raw prices would show "
                "every split as a crash, so nothing was stored.",
            )
        try:
            return _frame(rows, adjusted=adjusted)
        except (KeyError, TypeError, ValueError) as error:
            raise DownloadError("provider_error", f"The provider's bars are malformed: {error}") from None

    def session_minutes(self, *, ticker: str, session: date) -> pl.DataFrame:
        """One session's 1-minute bars so far (Tiingo's IEX endpoint), for the live frame feed."""
        day = session.isoformat()
        params = {"startDate": day, "endDate": day, "resampleFreq": "1min", "columns": "open,high,low,close,volume"}
        rows = self._get(f"/iex/{ticker.lower()}/prices", params)
        if not isinstance(rows, list):
            raise DownloadError("provider_error", "The provider's answer was not a list of bars.")
        try:
            return _frame(rows)
        except (KeyError, TypeError, ValueError) as error:
            raise DownloadError("provider_error", f"The provider's bars are malformed: {error}") from None


def default_provider() -> TiingoProvider:
    if not settings.LEROY_MARKET_DATA_TOKEN:
        raise DownloadError(
            "provider_not_configured", "No market-data provider is configured (LEROY_MARKET_DATA_TOKEN is empty)."
        )
    return TiingoProvider(base_url=settings.LEROY_MARKET_DATA_URL, token=settings.LEROY_MARKET_DATA_TOKEN)


def normalize(symbol: str, asset_class: str) -> tuple[str, str]:
    """(stored ticker, display name): pairs are stored compact (XAUUSD) and named with a slash (XAU/USD)."""
    text = normalize_ticker(symbol)
    if asset_class in ("forex", "crypto"):
        match = PAIR.match(text.replace(" ", ""))
        if match is None:
            raise DownloadError("invalid_symbol", f"{symbol!r} is not a currency, metal or crypto pair like EUR/USD.")
        return match.group(1) + match.group(2), f"{match.group(1)}/{match.group(2)}"
    if not re.match(r"^[A-Z][A-Z0-9.\-]{0,9}$", text):
        raise DownloadError("invalid_symbol", f"{symbol!r} is not a stock or ETF ticker.")
    return text, text


def market_data_download(
    *, symbol: str, frequency: str, asset_class: str, provider: Provider | None = None
) -> dict[str, Any]:
    """Store the symbol's full history at `frequency` unless it is already stored (then it is reused), reporting what
    the import found as a file import does: gaps in the stored sessions and possible unadjusted splits."""
    ticker, name = normalize(symbol, asset_class)
    existing = Symbol.objects.filter(ticker=ticker).first()
    if existing is not None and frequency in existing.frequencies:
        return {"symbol_id": str(existing.pk), "symbol": existing.ticker, "name": existing.name, "reused": True}
    frame = (provider or default_provider()).fetch(ticker=ticker, frequency=frequency, asset_class=asset_class)
    if frame.is_empty():
        raise DownloadError("no_data", f"The provider has no {frequency} bars for {name}.")
    quote = name.split("/")[1] if "/" in name else "USD"
    try:
        report = bars_import(
            ticker=ticker, frequency=frequency, frame=frame, name=name, asset_class=asset_class, currency=quote
        )
    except ImportRejected as error:
        raise DownloadError("import_rejected", str(error), **getattr(error, "details", {}) or {}) from None
    stored = Symbol.objects.get(ticker=ticker)
    return {
        "symbol_id": str(stored.pk),
        "symbol": stored.ticker,
        "name": stored.name,
        "reused": False,
        "frequency": frequency,
        "rows": report.rows_written,
        "first_timestamp": report.first_ts.isoformat().replace("+00:00", "Z"),
        "last_timestamp": report.last_ts.isoformat().replace("+00:00", "Z"),
        **report.findings(),
    }

"""Import OHLCV bars from a CSV or Parquet file into the bar store (validated; nothing written on rejection)."""

import json
from pathlib import Path
from typing import Any

import polars as pl
from django.core.management.base import BaseCommand, CommandError, CommandParser

from evidence.marketdata.importers import MAX_WARNINGS, SPLIT_TOLERANCE, ImportRejected, bars_import
from evidence.vocabulary import ASSET_CLASSES, FREQUENCIES

# Column names used by common vendors (Yahoo, Polygon, Alpaca, Finam/MetaStock, Stooq, IB exports), lowercased
# and stripped of angle brackets.
ALIASES = {
    "ts": ("ts", "timestamp", "datetime", "date_time", "time_stamp", "t", "date", "time"),  # TradingView: "time"
    "open": ("open", "o", "open_price"),
    "high": ("high", "h", "high_price"),
    "low": ("low", "l", "low_price"),
    "close": ("close", "c", "close_price", "last"),
    "volume": ("volume", "v", "vol"),
}


def _read(path: Path) -> pl.DataFrame:
    if path.suffix.lower() == ".parquet":
        return pl.read_parquet(path)
    return pl.read_csv(path, infer_schema_length=10000, try_parse_dates=False)


def _ambiguous_dates(text: pl.Series) -> None:
    """Slashed dates read either way (06/01/2015: 1 June or 6 January); polars would guess, so the caller says."""
    sample = text.drop_nulls().head(1).to_list()
    if sample and "/" in str(sample[0]):
        raise ImportRejected(
            f"dates like {sample[0]!r} read either day or month first; pass --date-format "
            "(e.g. '%m/%d/%Y' or '%d/%m/%Y %H:%M')",
            {"example": str(sample[0])},
        )


def _timestamps(column: pl.Series, timezone: str, date_format: str | None) -> pl.Series:
    if column.dtype.is_integer() or column.dtype.is_float():
        magnitude = abs(float(column.max()))  # type: ignore[arg-type]
        unit = "s" if magnitude < 1e11 else "ms" if magnitude < 1e14 else "us" if magnitude < 1e17 else "ns"
        scale = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": 0.001}[unit]
        return (column.cast(pl.Float64) * scale).cast(pl.Int64).cast(pl.Datetime("us", "UTC"))
    if isinstance(column.dtype, pl.Datetime):
        parsed = column
    elif column.dtype == pl.Date:
        parsed = column.cast(pl.Datetime("us"))
    else:
        text = column.cast(pl.String).str.strip_chars()
        if date_format is not None:
            parsed = text.str.to_datetime(date_format, time_unit="us", strict=True, ambiguous="raise")
        else:
            _ambiguous_dates(text)
            try:
                parsed = text.str.to_datetime(time_unit="us", strict=True, ambiguous="raise")
            except pl.exceptions.PolarsError:
                parsed = text.str.to_datetime(time_unit="us", strict=True, time_zone="UTC")
    if isinstance(parsed.dtype, pl.Datetime) and parsed.dtype.time_zone is None:
        parsed = parsed.dt.replace_time_zone(timezone, ambiguous="raise", non_existent="raise")
    return parsed.dt.convert_time_zone("UTC")


def vendor_frame(raw: pl.DataFrame, *, timezone: str = "UTC", date_format: str | None = None) -> pl.DataFrame:
    """Map a vendor layout onto ts, open, high, low, close, volume. `date_format` (strftime) reads the timestamps,
    or the date and time columns joined by a space; without it slashed dates are refused as ambiguous."""
    names = {name.strip().strip("<>").strip().lower().replace(" ", "_"): name for name in raw.columns}
    picked: dict[str, str] = {}
    for target, candidates in ALIASES.items():
        for candidate in candidates:
            if candidate in names:
                picked[target] = names[candidate]
                break
    if "date" in names and "time" in names:  # split date and time columns (Finam, MetaStock, some brokers)
        day = raw.get_column(names["date"]).cast(pl.String).str.strip_chars()
        time_text = raw.get_column(names["time"]).cast(pl.String).str.strip_chars()
        if date_format is not None:
            combined = (day + " " + time_text).str.to_datetime(date_format, time_unit="us", strict=True)
        else:
            _ambiguous_dates(day)
            # HH:MM (no seconds) gets its seconds before the colons go: 09:30 is 093000, not 000930.
            clock = time_text.str.replace(r"^(\d{1,2}:\d{2})$", "${1}:00").str.replace_all(":", "").str.zfill(6)
            combined = (day.str.replace_all("-", "").str.zfill(8) + clock).str.to_datetime(
                "%Y%m%d%H%M%S", time_unit="us", strict=True
            )
        ts = combined.dt.replace_time_zone(timezone, ambiguous="raise", non_existent="raise").dt.convert_time_zone(
            "UTC"
        )
    elif "ts" in picked:
        ts = _timestamps(raw.get_column(picked["ts"]), timezone, date_format)
    else:
        raise ImportRejected("no timestamp column found", {"columns": raw.columns})
    missing = [name for name in ("open", "high", "low", "close", "volume") if name not in picked]
    if missing:
        raise ImportRejected(
            f"missing columns: {', '.join(missing)}", {"missing_columns": missing, "columns": raw.columns}
        )
    return pl.DataFrame({"ts": ts}).with_columns(
        [raw.get_column(picked[name]).alias(name) for name in ("open", "high", "low", "close", "volume")]
    )


class Command(BaseCommand):
    help = (
        "Validate and import OHLCV bars (CSV or Parquet, common vendor layouts). Prints a JSON report: gaps in the "
        f"stored sessions around the import, and warnings (the first {MAX_WARNINGS}; warnings_total counts them all): "
        f"a session opening within {SPLIT_TOLERANCE:.1%} of a common split ratio of the previous close, e.g. 2:1 or "
        "1:10 reverse, a possible unadjusted split: check the bars are split-adjusted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--symbol", required=True)
        parser.add_argument("--frequency", required=True, choices=FREQUENCIES)
        parser.add_argument("--asset-class", default="equity", choices=ASSET_CLASSES)
        parser.add_argument("--name", default="")
        parser.add_argument("--exchange", default="")
        parser.add_argument("--currency", default="USD")
        parser.add_argument(
            "--timezone", default="UTC", help="zone of timestamps that carry none (e.g. America/New_York)"
        )
        parser.add_argument(
            "--date-format", help="strftime of the timestamps (of date and time joined by a space), e.g. %%m/%%d/%%Y"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        if not path.is_file():
            raise CommandError(f"no such file: {path}")
        try:
            raw = _read(path)
            frame = vendor_frame(raw, timezone=options["timezone"], date_format=options["date_format"])
            report = bars_import(
                ticker=options["symbol"],
                frequency=options["frequency"],
                frame=frame,
                name=options["name"],
                asset_class=options["asset_class"],
                exchange=options["exchange"],
                currency=options["currency"],
            )
        except ImportRejected as exc:
            raise CommandError(f"import rejected: {exc.message} {json.dumps(exc.details, sort_keys=True)}") from exc
        except pl.exceptions.PolarsError as exc:
            raise CommandError(f"import rejected: unreadable file or timestamps: {exc}") from exc
        self.stdout.write(json.dumps(report.as_dict(), sort_keys=True))

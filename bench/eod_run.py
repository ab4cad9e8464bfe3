"""End-of-day run: symbols x days per second of `eod_run` for the demo universe, against reading the same bars.

Runs in a throwaway database (`test_<name>` of DATABASE_URL, created and dropped here) and a temporary data
directory. Loads the demo universe's synthetic daily history (20 symbols from 2017-01-03, as `make demo` does,
without the minute bars), then times one real `eod_run` for its last session: reading every symbol's bars through
evidence.marketdata, re-hashing the input files, the engine, replay, held-out tail, walk-forward, and writing the
snapshot, its rows and the log entry, after an untimed run for the session before it. The baseline, measured in the
same run, is reading exactly those bars with the same selector (best of three). Prints one line.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leroy_bench .venv/bin/python bench/eod_run.py
"""

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from datetime import time as clock_time
from pathlib import Path

from cleanup import check_tree, exit_on_signals, throwaway_database  # bench/ is the script's directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 40)
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/leroy_bench")
os.environ.setdefault(
    "LEROY_LOG_SIGNING_KEY", "PRIVATE+KEY+test.leroy.invalid/log+775b8874+AYXDLWSYFsW2zIEwh4kXC7hOuq9iwYaHJCc7hfJj25pG"
)
os.environ.setdefault("LEROY_LOG_ORIGIN", "test.leroy.invalid/log")  # the key signs only under its own name

import django

django.setup()

from django.test import override_settings  # noqa: E402

from evidence.eod.services import eod_run  # noqa: E402
from evidence.eod.universe import universe_load  # noqa: E402
from evidence.marketdata import calendar, demo  # noqa: E402
from evidence.marketdata import selectors as marketdata  # noqa: E402
from evidence.marketdata.importers import bars_import  # noqa: E402


def read_all(tickers: tuple[str, ...], end: datetime) -> int:
    rows = 0
    for ticker in tickers:
        symbol = marketdata.symbol_get(ticker=ticker)
        assert symbol is not None
        rows += len(marketdata.bars_read(symbol=symbol, frequency="1d", end=end))
    return rows


def main() -> int:
    check_tree()
    exit_on_signals()
    parser = argparse.ArgumentParser()
    parser.add_argument("--symbols", type=int, default=20)
    options = parser.parse_args()
    calendar.xnys()  # loaded once per process, before anything is timed
    with throwaway_database(), tempfile.TemporaryDirectory() as data, override_settings(LEROY_DATA_DIR=data):
        frames = demo.daily_history(
            symbols=options.symbols, seed=demo.DEFAULT_SEED, first=demo.DEFAULT_DAILY_HISTORY_FROM,
            start=demo.DEFAULT_START,
        )  # fmt: skip
        for ticker, frame in frames.items():
            bars_import(ticker=ticker, frequency="1d", frame=frame, source="synthetic")
        universe = universe_load()
        tickers = tuple(t for t in universe.tickers if t in frames)
        previous, session = (ts.date() for ts in frames[tickers[0]].get_column("ts").sort().tail(2))
        end = datetime.combine(session, clock_time(23, 59, 59), tzinfo=UTC)
        # The session before, untimed: a worker runs one session a day, so the timed run finds what the previous
        # day's left warm (imports, the log's signer), as the warm baseline does.
        eod_run(session=previous, universe=universe)

        timings = []
        for _ in range(3):
            started = time.perf_counter()
            rows = read_all(tickers, end)
            timings.append(time.perf_counter() - started)
        read_seconds = min(timings)

        started = time.perf_counter()
        snapshot = eod_run(session=session, universe=universe)
        run_seconds = time.perf_counter() - started
        assert snapshot.row_count == len(universe.tickers)
        available = snapshot.rows.filter(available=True).count()
        assert available == len(tickers)
    print(
        f"eod_run: {len(tickers)} symbols x {rows // len(tickers)} days = {rows} symbol-days in {run_seconds:.2f} s "
        f"= {rows / run_seconds:,.0f} symbol-days/s; reading the same bars: {read_seconds:.3f} s = "
        f"{rows / read_seconds:,.0f} symbol-days/s (run / read = {run_seconds / read_seconds:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

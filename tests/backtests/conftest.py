import os
from datetime import UTC, datetime

import polars as pl
import pytest

from backtests import sandbox
from backtests.dryrun import walk
from evidence.marketdata.importers import bars_import
from evidence.models import Symbol

SMA_CROSS = """
class SmaCross(bt.Strategy):
    params = (("fast", 5), ("slow", 20), ("size", 10))

    def __init__(self):
        self.cross = bt.ind.CrossOver(bt.ind.SMA(self.data.close, period=self.p.fast),
                                      bt.ind.SMA(self.data.close, period=self.p.slow))

    def next(self):
        if not self.position and self.cross[0] > 0:
            self.buy(size=self.p.size)
        elif self.position and self.cross[0] < 0:
            self.close()
"""


def expected_layers() -> list[str]:
    """Every layer, less bubblewrap where it is not installed (a run then says so by leaving it out)."""
    missing = set() if sandbox.bubblewrap_usable() else {"bubblewrap"}
    return sorted(sandbox.ALL_LAYERS - missing | {"process"})


def require_bubblewrap() -> None:
    """Skip a bubblewrap-only test where it cannot create namespaces; under CI, which installs it, fail instead,
    so that layer is never silently left untested."""
    if not sandbox.bubblewrap_usable():
        message = "bubblewrap cannot create namespaces on this machine"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def frame_of(data: dict) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": pl.Series(data["ts_us"], dtype=pl.Int64).cast(pl.Datetime("us", "UTC")),
            **{k: data[k] for k in ("open", "high", "low", "close", "volume")},
        }
    )


@pytest.fixture(autouse=True)
def _sandbox_and_store(settings, tmp_path):
    settings.LEROY_DATA_DIR = str(tmp_path / "data")
    settings.LEROY_SANDBOX_CPU_SECONDS = 10
    settings.LEROY_SANDBOX_WALL_SECONDS = 30
    settings.LEROY_SANDBOX_MEMORY_MB = 768


def import_walk(ticker: str, *, bars: int = 120, seed: int = 7, start: datetime | None = None) -> Symbol:
    bars_import(
        ticker=ticker,
        frequency="1d",
        frame=frame_of(walk(ticker, bars=bars, seed=seed, **({"start": start} if start else {}))),
        asset_class="crypto",
        name=f"{ticker[:3]}/{ticker[3:]}",
    )
    return Symbol.objects.get(ticker=ticker)


@pytest.fixture
def coin(db) -> Symbol:
    return import_walk("TSTUSD")


@pytest.fixture
def other_coin(db) -> Symbol:
    return import_walk("XAUUSD", seed=11)


@pytest.fixture
def coin_apart(db) -> Symbol:
    """A symbol whose bars are a day later than `coin`'s: with it, a probe runs cuts, not one streamed run."""
    return import_walk("LTCUSD", seed=13, start=datetime(2024, 1, 3, tzinfo=UTC))


def optimization_args(strategy_id, data_id, **overrides):
    return {
        "strategy_id": strategy_id, "name": "grid", "data_ids": [data_id], "frequency": "1d",
        "start_date": "2024-01-01", "end_date": "2024-12-31T23:59:59Z",
        "grids": [{"name": "fast", "min": 3, "max": 6, "step": 1}],
        "parameters": [{"name": "size", "value": 2}], "target_metric": "realized_pnl", "target_direction": "maximize",
    } | overrides  # fmt: skip

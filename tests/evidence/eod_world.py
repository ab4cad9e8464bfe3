"""A small end-of-day world: two symbols with synthetic daily bars in the store, a third the universe names but the
store lacks, and a universe file with a short replay window, a held-out tail and walk-forward years."""

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import polars as pl
from django.test import override_settings

from evidence.eod.universe import Universe, universe_load
from evidence.marketdata import demo
from evidence.marketdata.importers import bars_import

FIRST, START = date(2019, 1, 2), date(2023, 3, 1)  # START: the first session without a daily bar
LAST = date(2023, 2, 28)  # the last stored session


@dataclass(frozen=True)
class EodWorld:
    universe: Universe
    path: Path


def eod_world(tmp_path: Path, *, extra_session: bool = False, missing: dict[str, date] | None = None) -> EodWorld:
    """`missing` drops one ticker's bar of one session, as a vendor file with a hole would."""
    frames = demo.daily_history(symbols=2, seed=3, first=FIRST, start=START)
    for ticker in ("ALFA", "BRVO"):
        frame = frames[ticker]
        if missing and ticker in missing:
            frame = frame.filter(pl.col("ts").dt.date() != missing[ticker])
        bars_import(ticker=ticker, frequency="1d", frame=frame, name=ticker, source="synthetic")
    document = {
        "name": "test-eod",
        "version": "1",
        "tickers": ["ALFA", "BRVO", "CHRL"],
        "replay_sessions": 500,
        "heldout": {"first": "2022-07-01", "last": "2022-12-30"},
        "walk_forward_first_year": 2021,
    }
    path = tmp_path / "universe.json"
    path.write_text(json.dumps(document))
    return EodWorld(universe=universe_load(path), path=path)


def universe_settings(world: EodWorld) -> override_settings:
    return override_settings(LEROY_EOD_UNIVERSE=str(world.path))

"""Served counts of the synthetic world recomputed with pandas from the stored point-in-time rows."""

import pandas as pd
import pytest

from evidence.marketdata import store
from evidence.memory.artifact import BuildPlan, feature_store_path
from evidence.memory.selectors import memory_reader

pytestmark = pytest.mark.django_db


def test_pooled_tiers_count_distinct_market_dates_not_symbol_session_pairs(world):
    reader = memory_reader()
    plan = BuildPlan(**reader.manifest["plan"])
    frames = []
    for ticker in [t for t in plan.tickers if plan.asset_classes[t] == "equity"]:  # the pool of an equity request
        rows = store.scan_parquet([feature_store_path(ticker, plan)]).collect().to_pandas()
        frames.append(rows.assign(symbol=ticker))
    rows = pd.concat(frames)
    rows = rows[rows["ready"] & rows["lbl_15"].notna()]
    rows = rows[pd.to_datetime(rows["session"]) <= pd.Timestamp(plan.historical_through)]

    # tier 1 (every buy row at 15 minutes) and the most common tier-3 mask, independently aggregated
    biggest_mask = rows["buy_mask"].value_counts().index[0]
    pairs_exceed_sessions = False
    for tier, subset, key in ((1, rows, {}), (3, rows[rows["buy_mask"] == biggest_mask], {"mask": int(biggest_mask)})):
        served = reader.key_evidence(tier=tier, side="buy", horizon=15, **key)
        assert served is not None
        pairs = len(subset[["symbol", "session"]].drop_duplicates())
        assert (served.row_count, served.distinct_sessions, served.distinct_symbols) == (
            len(subset),
            subset["session"].nunique(),
            subset["symbol"].nunique(),
        )
        assert served.average_return_pct == round(subset["lbl_15"].sum() / len(subset) / 1_000_000, 10)
        pairs_exceed_sessions |= pairs > served.distinct_sessions
    assert pairs_exceed_sessions  # the world pools symbols on shared dates, so the old pair count would differ

"""Every tier's served statistics recomputed with independent pandas code: the tier cascade, sample size, distinct
sessions and symbols, average return, win rate, profit factor and lift. Returns and sessions come from the raw minute
bars; the strategy masks and regimes are the stored point-in-time rows'."""

from typing import Any

import pandas as pd
import pytest

from evidence.marketdata import store
from evidence.marketdata.selectors import bars_read
from evidence.memory.artifact import BuildPlan, feature_store_path
from evidence.memory.selectors import memory_reader
from evidence.models import Symbol

pytestmark = pytest.mark.django_db
HORIZON = 15


def raw_bar_returns(ticker: str) -> pd.DataFrame:
    """Per raw minute bar: its New York session date and the forward return to the bar HORIZON minutes later in
    1e-8 units, or null unless every minute up to it is a bar of the same session."""
    bars = bars_read(symbol=Symbol.objects.get(ticker=ticker), frequency="1m").to_pandas()
    session = bars["ts"].dt.tz_convert("America/New_York").dt.date
    later = bars.shift(-HORIZON)
    whole = (later["ts"] - bars["ts"] == pd.Timedelta(minutes=HORIZON)) & (session.shift(-HORIZON) == session)
    ratio = (later["close"] / bars["close"] - 1) * 1e8
    return pd.DataFrame({"ts": bars["ts"], "raw_session": session, "raw_r": ratio.round(0).where(whole)})


def pooled_rows(reader: Any, asset_class: str = "equity") -> pd.DataFrame:
    """The historical buy rows at 15 minutes with a mature label, every symbol of one asset class (the pool), with
    each row's return and session recomputed from the raw bars."""
    plan = BuildPlan(**reader.manifest["plan"])
    frames = []
    for ticker in [t for t in plan.tickers if plan.asset_classes[t] == asset_class]:
        stored = store.scan_parquet([feature_store_path(ticker, plan)]).collect().to_pandas()
        frames.append(stored.merge(raw_bar_returns(ticker), on="ts", how="left").assign(symbol=ticker))
    rows = pd.concat(frames)
    rows = rows[rows["ready"]]
    # The stored labels and sessions are the raw bars' own, so the statistics below rest on the bars.
    assert (rows[f"lbl_{HORIZON}"].notna() == rows["raw_r"].notna()).all()
    rows = rows[rows["raw_r"].notna()]
    assert rows[f"lbl_{HORIZON}"].astype("int64").tolist() == rows["raw_r"].astype("int64").tolist()
    assert (pd.to_datetime(rows["session"]) == pd.to_datetime(rows["raw_session"])).all()
    rows = rows[pd.to_datetime(rows["raw_session"]) <= pd.Timestamp(plan.historical_through)]
    return rows.assign(
        r=rows["raw_r"].astype("int64"),
        session=rows["raw_session"],
        mask=rows["buy_mask"].astype("int64"),
        band=rows["buy_mask"].astype("int64").map(lambda m: min(int(m).bit_count(), 4)),
    )


def stats(subset: pd.DataFrame) -> dict[str, Any]:
    r = subset["r"]
    losses = int((-r).clip(lower=0).sum())
    return {
        "row_count": len(subset),
        "distinct_sessions": subset["session"].nunique(),
        "distinct_symbols": subset["symbol"].nunique(),
        "average_return_pct": round(int(r.sum()) / len(subset) / 1_000_000, 10),
        "win_rate": round(int((r > 0).sum()) / len(subset), 6),
        "profit_factor": round(int(r.clip(lower=0).sum()) / losses, 6) if losses else None,
    }


TIER_COLUMNS = {5: ["symbol", "mask", "regime"], 4: ["mask", "regime"], 3: ["mask"], 2: ["regime", "band"]}


def distinct_sessions(rows: pd.DataFrame) -> dict[int, dict[Any, int]]:
    """Per tier, each key's distinct sessions (keys as tuples of the tier's columns)."""
    return {
        tier: {
            (key if isinstance(key, tuple) else (key,)): n
            for key, n in rows.groupby(columns)["session"].nunique().items()
        }
        for tier, columns in TIER_COLUMNS.items()
    }


def tier_of(sessions: dict[int, dict[Any, int]], setup: dict[str, Any], minimum: int) -> int:
    """The strongest tier >= 2 whose key has the minimum distinct sessions (0: none)."""
    for tier, columns in TIER_COLUMNS.items():
        if sessions[tier].get(tuple(setup[c] for c in columns), 0) >= minimum:
            return tier
    return 0


def cascade(
    rows: pd.DataFrame, sessions: dict[int, dict[Any, int]], symbol: str, mask: int, regime: int, minimum: int
) -> tuple[int, dict[str, Any]]:
    """The strongest tier >= 2 with the minimum distinct sessions, and its lift over its baseline, by hand."""
    setup = {"symbol": symbol, "mask": mask, "regime": regime, "band": min(mask.bit_count(), 4)}
    tier = tier_of(sessions, setup, minimum)
    if tier == 0:
        return 0, {}
    columns = TIER_COLUMNS[tier]
    subset = rows[(rows[columns] == pd.Series({c: setup[c] for c in columns})).all(axis=1)]
    baseline = rows[rows["symbol"] == symbol] if tier == 5 else rows
    lift = None
    if baseline["session"].nunique() >= minimum:
        lift = round((int(subset["r"].sum()) / len(subset) - int(baseline["r"].sum()) / len(baseline)) / 1e4, 4)
    return tier, {**stats(subset), "lift_vs_baseline_bps": lift}


def test_every_tier_served_for_a_setup_is_its_pandas_recomputation(world):
    reader = memory_reader()
    rows = pooled_rows(reader)
    sessions = distinct_sessions(rows)
    minimum = reader.min_sessions
    setups = sorted(set(zip(rows["symbol"], rows["mask"], rows["regime"], strict=True)))
    unseen = max(rows["mask"]) + 1  # a signal set history never saw: only the contextual tier can answer
    setups += [(symbol, unseen | 0b1111, regime) for symbol, _, regime in setups[:50]]
    checked: dict[int, int] = {}
    for symbol, mask, regime in setups:
        setup = {"symbol": symbol, "mask": int(mask), "regime": int(regime), "band": min(int(mask).bit_count(), 4)}
        found = tier_of(sessions, setup, minimum)
        if found == 0 or checked.get(found, 0) >= 3:
            continue
        tier, expected = cascade(rows, sessions, symbol, int(mask), int(regime), minimum)
        served = reader.resolve(symbol=symbol, side="buy", mask=int(mask), regime=int(regime), horizons=(HORIZON,))
        match = served[HORIZON].match
        assert match is not None and match.tier == tier, (symbol, mask, regime)
        assert {name: getattr(match, name) for name in expected} == expected
        checked[tier] = checked.get(tier, 0) + 1
    assert checked == {5: 3, 4: 3, 3: 3, 2: 3}


def test_a_pooled_key_with_enough_symbol_session_pairs_but_too_few_dates_does_not_pass_the_gate(world):
    reader = memory_reader()
    rows = pooled_rows(reader)
    minimum = reader.min_sessions
    by_mask = pd.DataFrame(
        {
            "sessions": rows.groupby("mask")["session"].nunique(),
            "pairs": rows.drop_duplicates(["mask", "symbol", "session"]).groupby("mask").size(),
        }
    )
    short = by_mask[(by_mask["pairs"] >= minimum) & (by_mask["sessions"] < minimum)]
    assert not short.empty  # the world holds such keys: symbols sharing dates
    for mask in short.index[:5]:
        assert reader.key_evidence(tier=3, side="buy", horizon=HORIZON, mask=int(mask)) is None
        symbol, regime = rows[rows["mask"] == mask].iloc[0][["symbol", "regime"]]
        resolved = reader.resolve(symbol=symbol, side="buy", mask=int(mask), regime=int(regime), horizons=(HORIZON,))
        assert resolved[HORIZON].match is None or resolved[HORIZON].match.tier == 2
        assert (3, None) in resolved[HORIZON].unusable  # passed over: never stored, never pooled down


def test_pooled_tiers_pool_only_the_asset_class_the_request_names(world):
    reader = memory_reader()
    assert reader.asset_classes == {"SYNX": "index", "ALFA": "equity", "BRVO": "equity"}
    for asset_class, symbols in (("equity", {"ALFA", "BRVO"}), ("index", {"SYNX"})):
        rows = pooled_rows(reader, asset_class)
        served = reader.key_evidence(tier=1, side="buy", horizon=HORIZON, asset_class=asset_class)
        assert served is not None
        assert set(rows["symbol"]) == symbols
        assert {name: getattr(served, name) for name in stats(rows)} == stats(rows)
    # The index's setup resolves inside its own pool: no equity row is ever evidence for it, nor it for an equity.
    index = pooled_rows(reader, "index")
    symbol, mask, regime = index.iloc[0][["symbol", "mask", "regime"]]
    tier, expected = cascade(index, distinct_sessions(index), symbol, int(mask), int(regime), reader.min_sessions)
    match = reader.resolve(symbol="SYNX", side="buy", mask=int(mask), regime=int(regime), horizons=(HORIZON,))
    found = match[HORIZON].match
    assert found is not None
    assert (found.tier, found.distinct_symbols) == (tier, 1)
    assert {name: getattr(found, name) for name in expected} == expected

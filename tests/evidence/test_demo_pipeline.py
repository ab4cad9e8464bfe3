"""The demo universe end to end: load, build Market Memory twice, inspect a frame, look a setup up."""

import hashlib
import io
import json
from datetime import date, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from django.core.management import call_command
from django.test import override_settings

from evidence.marketdata import calendar, demo
from evidence.marketdata.importers import bars_import, demo_data_load
from evidence.marketdata.store import BAR_SCHEMA
from evidence.memory.selectors import memory_lookup, memory_reader
from evidence.models import BarPartition, Corpus, MarketMemoryArtifact, Symbol

pytestmark = pytest.mark.django_db

START = date(2024, 1, 2)


def test_a_shorter_demo_universe_is_an_exact_prefix_of_a_longer_one() -> None:
    short = demo.generate(symbols=2, sessions=3, seed=5, start=START)
    long = demo.generate(symbols=2, sessions=5, seed=5, start=START)
    other = demo.generate(symbols=2, sessions=3, seed=6, start=START)

    for ticker, frame in short.items():
        assert long[ticker].head(len(frame)).equals(frame)
        assert long[ticker].get_column("ts").min() == datetime.fromisoformat("2024-01-02T14:30:00+00:00")
        assert not other[ticker].equals(frame)
    assert list(short) == ["SYNX", "ALFA", "BRVO"]


def _run(*args: str) -> list[str]:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_demo_loads_builds_identically_twice_and_inspects_honest_rows() -> None:
    lines = _run("load_demo_data", "--symbols", "1", "--sessions", "63", "--overlay-sessions", "2", "--seed", "3",
                 "--start", START.isoformat())  # fmt: skip

    clock = lines[-1]
    assert clock.startswith("LEROY_CLOCK=replay:")
    replay = datetime.fromisoformat(clock.removeprefix("LEROY_CLOCK=replay:").replace("Z", "+00:00"))
    sessions = calendar.sessions_between(START, date(2024, 12, 31))[:63]
    assert calendar.session_of_minute(replay) == sessions[-1]
    corpus = Corpus.objects.get()
    assert (corpus.source, corpus.historical_through, corpus.overlay_tickers) == ("synthetic", sessions[-3], ["ALFA"])
    assert set(BarPartition.objects.values_list("source", flat=True)) == {"synthetic"}

    # the real clock is months past the replay session: the open replay session is still never built
    first = json.loads(_run("build_market_memory")[-1])
    with override_settings(LEROY_CLOCK=clock.removeprefix("LEROY_CLOCK=")):
        second = json.loads(_run("build_market_memory", "--force")[-1])
        reused = json.loads(_run("build_market_memory")[-1])
        reader = memory_reader(refresh=True)
        fresh = reader.freshness(at=replay)
        overlay = memory_lookup(symbol="ALFA", side="buy", active=0, regime=4, overlay=True, at=replay)

    assert second["sha256"] == first["sha256"] == reused["sha256"]
    assert MarketMemoryArtifact.objects.get().is_active is True
    manifest = reader.manifest
    assert manifest["source"] == "synthetic"
    assert manifest["coverage"]["historical"]["first_session"] == sessions[60].isoformat()
    assert manifest["coverage"]["historical"]["last_session"] == sessions[60].isoformat()
    assert manifest["coverage"]["forward_overlay"]["last_session"] == sessions[61].isoformat()
    assert (fresh["status"], fresh["lag_sessions"]) == ("current", 0)
    assert overlay.withheld_reason is None and overlay.period == "forward_overlay"

    ready_minute = f"{sessions[60].isoformat()}T15:00:00Z"
    frame = json.loads(_run("inspect_frame", "ALFA", ready_minute)[-1])
    assert {"ready", "features", "strategy_states", "regime", "labels"} <= set(frame)
    assert frame["ready"] is True
    assert set(frame["labels"]) == {"5", "15", "30", "60"}
    assert all(isinstance(value, int) for value in frame["labels"].values())
    assert len(frame["strategy_states"]) == 41
    assert frame["source"] == "synthetic"

    warmup = json.loads(_run("inspect_frame", "ALFA", f"{sessions[10].isoformat()}T20:58:00Z")[-1])
    assert warmup["ready"] is False
    assert warmup["regime"]["id"] is None
    assert warmup["labels"] == {"5": None, "15": None, "30": None, "60": None}  # 2 minutes before the close
    assert all(state == {"buy": None, "sell": None} for state in warmup["strategy_states"].values())


def test_freshness_is_behind_once_later_sessions_complete() -> None:
    _run("load_demo_data", "--symbols", "1", "--sessions", "63", "--overlay-sessions", "2", "--seed", "3",
         "--start", START.isoformat())  # fmt: skip
    sessions = calendar.sessions_between(START, date(2024, 12, 31))
    with override_settings(LEROY_CLOCK="replay:" + f"{sessions[62].isoformat()}T15:00:00Z"):
        _run("build_market_memory")
        reader = memory_reader(refresh=True)

    later = calendar.schedule(sessions[64], sessions[64]).get_column("session_close").item()
    fresh = reader.freshness(at=later)
    withheld = memory_lookup(symbol="ALFA", side="buy", active=0, regime=4, overlay=True, at=later)

    assert (fresh["status"], fresh["lag_sessions"]) == ("behind", 3)
    assert withheld.withheld_reason == "forward overlay is behind"
    assert set(withheld.matches.values()) == {None}


def test_a_benchmark_universe_past_the_26_names_reuses_them_with_a_round_number() -> None:
    tickers = [member.ticker for member in demo.universe(53)]

    assert len(tickers) == len(set(tickers)) == 54
    assert tickers[:3] == ["SYNX", "ALFA", "BRVO"]
    assert tickers[26:29] == ["ZULU", "ALFA1", "BRVO1"]
    assert tickers[-1] == "ALFA2"
    with pytest.raises(ValueError, match="between 1 and 2600"):
        demo.universe(2601)


# The generator as it was before it was batched: one (symbol, session) at a time. The batched generator must give
# exactly these values, so universes (and the artifacts built from them) stay what they were for every seed.
def _reference_bars(rng, log_returns, previous_close, gap_vol, base_volume, shapes):  # type: ignore[no-untyped-def]
    minutes = len(log_returns)
    gap = rng.normal(0.0, gap_vol) + (rng.normal(0.0, 4 * gap_vol) if rng.random() < 0.03 else 0.0)
    path = previous_close * np.exp(gap + np.cumsum(log_returns))
    close = np.round(path, 2)
    open_ = np.round(np.concatenate([[previous_close * np.exp(gap)], path[:-1]]), 2)
    wiggle = np.abs(rng.normal(0.0, np.abs(log_returns).mean() + 1e-5, size=(2, minutes))) * path
    high = np.round(np.maximum(np.maximum(open_, close), np.maximum(open_, close) + wiggle[0]), 2)
    low = np.round(np.minimum(np.minimum(open_, close), np.minimum(open_, close) - wiggle[1]), 2)
    low = np.maximum(low, 0.01)
    spikes = np.where(rng.random(minutes) < 0.004, rng.uniform(3.0, 8.0, minutes), 1.0)
    volume = np.round(base_volume * shapes[minutes] * rng.lognormal(0.0, 0.5, minutes) * spikes)
    return {"open": open_, "high": high, "low": low, "close": close, "volume": volume}, float(close[-1])


def _reference_generate(*, symbols: int, sessions: int, seed: int, start: date) -> dict[str, pl.DataFrame]:
    days = [calendar.session_offset(demo.demo_sessions(start, 1)[0], i) for i in range(sessions)]
    sched = calendar.schedule(days[0], days[-1])
    opens_us = sched.get_column("session_open").dt.epoch("us").to_numpy()
    lengths = ((sched.get_column("session_close") - sched.get_column("session_open")).dt.total_minutes()).to_list()
    market = list(demo._market(seed, lengths))
    shapes = {minutes: demo._u_shape(minutes) for minutes in set(lengths)}
    minute_ts = [opens_us[i] + np.arange(minutes, dtype=np.int64) * 60_000_000 for i, minutes in enumerate(lengths)]
    out: dict[str, pl.DataFrame] = {}
    for member in demo.universe(symbols):
        beta, idio, price, base_volume = demo._profile(seed, member)
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in ("ts", "open", "high", "low", "close", "volume")}
        for index, minutes in enumerate(lengths):
            rng = demo._rng(seed, member.index, index)
            noise = idio * shapes[minutes] * rng.standard_t(4, size=minutes) / np.sqrt(2.0)
            columns, price = _reference_bars(
                rng, beta * market[index] + noise, price, 0.004 + idio * 4, base_volume, shapes
            )
            columns["ts"] = minute_ts[index]
            if member.asset_class != "index" and rng.random() < 0.15:
                dropped = rng.choice(np.arange(1, minutes - 1), size=int(rng.integers(1, 4)), replace=False)
                keep = np.ones(minutes, dtype=bool)
                keep[dropped] = False
                columns = {name: values[keep] for name, values in columns.items()}
            for name, values in columns.items():
                chunks[name].append(values)
        frame = pl.DataFrame({name: np.concatenate(parts) for name, parts in chunks.items()})
        out[member.ticker] = frame.with_columns(pl.col("ts").cast(pl.Datetime("us", "UTC"))).cast(BAR_SCHEMA)  # type: ignore[arg-type]
    return out


def test_batched_generation_gives_exactly_the_one_session_at_a_time_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    # From before the 2023-11-24 early close across the new year; batches of 2 symbols (the index in the first).
    monkeypatch.setattr(demo, "BATCH_ROWS", 2 * 390 * 30)
    start = date(2023, 11, 20)
    reference = _reference_generate(symbols=4, sessions=30, seed=9, start=start)
    batches = list(demo.generate_batches(symbols=4, sessions=30, seed=9, start=start))

    assert [list(batch) for batch in batches] == [["SYNX", "ALFA"], ["BRVO", "CHRL"], ["DLTA"]]
    pairs = {ticker: pair for batch in batches for ticker, pair in batch.items()}
    assert list(pairs) == list(reference)
    assert sum(len(frame) for frame in reference.values()) < 5 * 30 * 390  # equities did drop minutes
    for ticker, frame in reference.items():
        minutes, daily = pairs[ticker]
        assert minutes.schema == frame.schema
        assert minutes.equals(frame), ticker
        assert daily.equals(demo.daily_from_minutes(frame).cast(BAR_SCHEMA)), ticker  # type: ignore[arg-type]
    assert demo.demo_sessions(start, 30) == [calendar.session_offset(date(2023, 11, 20), i) for i in range(30)]


def _stored() -> dict[tuple[str, str, int], tuple[object, ...]]:
    return {
        (p.symbol.ticker, p.frequency, p.year): (p.path, p.sha256, p.row_count, p.first_ts, p.last_ts, p.source)
        for p in BarPartition.objects.select_related("symbol")
    }


def test_the_demo_load_stores_exactly_the_files_and_rows_bars_import_stores(data_dir: Path) -> None:
    start, history = date(2023, 9, 1), date(2022, 11, 1)
    demo_data_load(symbols=2, sessions=84, seed=9, start=start, overlay_sessions=2, daily_history_from=history)
    fast = _stored()
    symbols = {s.ticker: (s.name, s.asset_class, s.exchange, s.currency, s.frequencies) for s in Symbol.objects.all()}
    for path, sha, *_ in fast.values():
        assert hashlib.sha256((data_dir / path).read_bytes()).hexdigest() == sha

    # The validated path: bars_import of the same bars, one symbol and frequency at a time.
    Corpus.objects.all().delete()
    BarPartition.objects.all().delete()
    Symbol.objects.all().delete()
    daily_history = demo.daily_history(symbols=2, seed=9, first=history, start=start)
    for member in demo.universe(2):
        minutes = _reference_generate(symbols=2, sessions=84, seed=9, start=start)[member.ticker]
        common = {"name": member.name, "asset_class": member.asset_class, "exchange": "SYNTH", "source": "synthetic"}
        bars_import(ticker=member.ticker, frequency="1m", frame=minutes, **common)
        daily = pl.concat([daily_history[member.ticker], demo.daily_from_minutes(minutes)])
        bars_import(ticker=member.ticker, frequency="1d", frame=daily, **common)

    assert {key[2] for key in fast} == {2022, 2023, 2024}
    assert len(fast) == 3 * (2 + 3)  # per symbol: 1m in 2023 and 2024, 1d in 2022 to 2024
    assert _stored() == fast
    assert {
        s.ticker: (s.name, s.asset_class, s.exchange, s.currency, s.frequencies) for s in Symbol.objects.all()
    } == symbols

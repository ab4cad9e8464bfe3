"""The demo universe end to end: load, build Market Memory twice, inspect a frame, look a setup up."""

import io
import json
from datetime import date, datetime

import pytest
from django.core.management import call_command
from django.test import override_settings

from evidence.marketdata import calendar, demo
from evidence.memory.selectors import memory_lookup, memory_reader
from evidence.models import BarPartition, Corpus, MarketMemoryArtifact

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

"""Tiers, artifact identity and activation on hand-built universes whose statistics are computed by hand."""

import hashlib
import io
import json
import re
import threading
from datetime import date
from pathlib import Path

import polars as pl
import pytest
from django.db import connection
from django.test import override_settings

from evidence.marketdata.importers import bars_import
from evidence.memory import build as memory
from evidence.memory.features import FEATURES
from evidence.memory.reader import ArtifactRefused, MemoryReader
from evidence.memory.selectors import memory_lookup, memory_reader
from evidence.memory.services import market_memory_activate, market_memory_build_run, market_memory_build_start
from evidence.models import Corpus, MarketMemoryArtifact, Symbol
from evidence.vocabulary import HORIZONS
from tests.evidence.factories import minute_bars, utc

D1, D2 = date(2026, 6, 29), date(2026, 6, 30)
AB, A = 0b11, 0b01  # two active buy strategies, and only the first
# (symbol, session, buy mask, regime, 5-minute buy label in 1e-8 units)
ROWS = [
    ("AAA", D1, AB, 4, 100),
    ("AAA", D1, AB, 4, -50),
    ("AAA", D1, A, 4, 30),
    ("AAA", D2, AB, 4, 20),
    ("AAA", D2, AB, 5, 10),
    ("BBB", D1, AB, 4, -40),
    ("BBB", D1, A, 5, 60),
]


def hand_frame(ticker: str, rows: list[tuple]) -> pl.DataFrame:
    mine = [row for row in rows if row[0] == ticker]
    n = len(mine)
    label = pl.Series([row[4] for row in mine], dtype=pl.Int64)
    null = pl.Series([None] * n, dtype=pl.Int64)
    return pl.DataFrame(
        {
            "ts": pl.Series(
                [utc(2026, 6, 29 + (row[1] == D2), 14, i) for i, row in enumerate(mine)], dtype=pl.Datetime("us", "UTC")
            ),
            "session": pl.Series([row[1] for row in mine], dtype=pl.Date),
            "ready": pl.Series([True] * n, dtype=pl.Boolean),
            "is_fill": pl.Series([False] * n, dtype=pl.Boolean),
            "minute_of_session": pl.Series([30 + i for i in range(n)], dtype=pl.Int32),
            "volume": pl.Series([100.0] * n, dtype=pl.Float64),
            "regime": pl.Series([row[3] for row in mine], dtype=pl.Int8),
            "trend": pl.Series([0] * n, dtype=pl.Int8),
            "volatility": pl.Series([1] * n, dtype=pl.Int8),
            "tod": pl.Series([1] * n, dtype=pl.Int8),
            "buy_mask": pl.Series([row[2] for row in mine], dtype=pl.Int64),
            "sell_mask": pl.Series([0] * n, dtype=pl.Int64),
            "n_buy": pl.Series([row[2].bit_count() for row in mine], dtype=pl.Int8),
            "n_sell": pl.Series([0] * n, dtype=pl.Int8),
            **{name: pl.Series([None] * n, dtype=pl.Float64) for name in FEATURES if name != "minute_of_session"},
            **{f"lbl_{h}": label if h == 5 else null for h in HORIZONS},
            **{f"hi_{h}": label + 10 if h == 5 else null for h in HORIZONS},
            **{f"lo_{h}": label - 10 if h == 5 else null for h in HORIZONS},
        }
    )


@pytest.fixture
def universe(db: None, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Three symbols with real bars in the store (the benchmark's feed the regime table); frames are hand-built."""
    for ticker in ("AAA", "BBB", "IDX"):
        bars_import(
            ticker=ticker,
            frequency="1m",
            frame=minute_bars([D1, D2]),
            asset_class="index" if ticker == "IDX" else "equity",
        )
    Corpus.objects.create(
        source="vendor", benchmark=Symbol.objects.get(ticker="IDX"), historical_through=D2, created_at=utc(2026, 7, 1)
    )
    rows = list(ROWS)
    monkeypatch.setattr(memory, "symbol_evidence_frame", lambda ticker, plan: hand_frame(ticker, rows))
    return rows


def build(min_sessions: int = 2) -> MarketMemoryArtifact:
    with override_settings(LEROY_MM_MIN_SESSIONS=min_sessions):
        artifact = market_memory_build_run(force=True)
    memory_reader(refresh=True)
    return artifact


def test_exact_setup_wins_with_hand_computed_statistics(universe: list[tuple]) -> None:
    build()

    answer = memory_lookup(symbol="AAA", side="buy", active=AB, regime=4, horizons=(5, 15))

    exact = answer.matches[5]
    assert exact is not None
    # AAA, both strategies, regime 4: +100, -50 (D1) and +20 (D2)
    assert (exact.tier, exact.tier_name, exact.row_count, exact.distinct_sessions) == (5, "exact_setup", 3, 2)
    assert exact.average_return_pct == round(70 / 3 / 1_000_000, 10)
    assert exact.median_return_pct == 20 / 1_000_000
    assert exact.win_rate == round(2 / 3, 6)
    assert exact.profit_factor == 2.4
    # lift against AAA's own baseline: +100 -50 +30 +20 +10 over 5 rows
    assert exact.lift_vs_baseline_bps == round((70 / 3 - 110 / 5) / 10_000, 4)
    assert exact.mean_favourable_excursion_pct == round(100 / 3 / 1_000_000, 10)
    assert answer.matches[15] is None  # no mature 15-minute label anywhere: nothing is inferred


def test_cross_ticker_tier_when_the_exact_key_lacks_sessions(universe: list[tuple]) -> None:
    build()

    match = memory_lookup(symbol="BBB", side="buy", active=AB, regime=4, horizons=(5,)).matches[5]

    # BBB's own exact key has one session (< 2); tier 4 pools AAA and BBB rows of that key: +100 -50 +20 -40,
    # on two market dates (AAA and BBB both traded D1: one session, not two)
    assert match is not None
    assert (match.tier, match.row_count, match.distinct_sessions, match.distinct_symbols) == (4, 4, 2, 2)
    assert match.average_return_pct == 30 / 4 / 1_000_000
    assert (match.win_rate, match.profit_factor) == (0.5, round(120 / 90, 6))
    assert match.lift_vs_baseline_bps == round((30 / 4 - 130 / 7) / 10_000, 4)


def test_signal_pattern_tier_and_a_profit_factor_without_losses(universe: list[tuple]) -> None:
    build(min_sessions=1)

    match = memory_lookup(symbol="AAA", side="buy", active=["sma_cross_20_50"], regime=6, horizons=(5,)).matches[5]

    # mask 0b01 never occurred in regime 6; in any regime: AAA +30 (D1), BBB +60 (D1): two rows, one market date
    assert match is not None
    assert (match.tier, match.row_count, match.distinct_sessions, match.distinct_symbols) == (3, 2, 1, 2)
    assert match.win_rate == 1.0
    assert match.profit_factor is None


def test_symbol_session_pairs_above_the_minimum_do_not_pass_the_gate(universe: list[tuple]) -> None:
    build(min_sessions=2)

    answer = memory_lookup(symbol="AAA", side="buy", active=["sma_cross_20_50"], regime=6, horizons=(5,))

    # the signal-pattern key holds 2 (symbol, session) pairs but 1 market date: below 2, so it is not the match
    assert answer.matches[5] is None  # and the direction-only baseline (2 sessions) is never a match


def test_a_tier_below_the_minimum_is_not_shown_nor_pooled(universe: list[tuple]) -> None:
    build(min_sessions=2)
    match = memory_lookup(symbol="BBB", side="buy", active=AB, regime=4, horizons=(5,)).matches[5]
    # BBB's exact key (1 session) is withheld; tier 4 stands alone, its 4 rows not mixed with the exact key's rows
    assert match is not None
    assert (match.tier, match.row_count) == (4, 4)

    build(min_sessions=3)
    # tier 4 holds 3 (symbol, session) pairs but only 2 market dates, and the universe has only 2 sessions: no key
    # of any tier reaches 3 distinct sessions, so nothing is shown
    assert memory_lookup(symbol="AAA", side="buy", active=AB, regime=4, horizons=(5,)).matches[5] is None


def test_sell_side_evidence_is_the_negated_return(universe: list[tuple]) -> None:
    build()

    match = memory_lookup(symbol="AAA", side="sell", active=0, regime=4, horizons=(5,)).matches[5]

    # no sell strategy was ever active, so AAA's empty sell set in regime 4 is every such row: -100 +50 -30 -20
    assert match is not None
    assert (match.tier, match.row_count, match.distinct_sessions) == (5, 4, 2)
    assert match.average_return_pct == -100 / 4 / 1_000_000
    assert (match.win_rate, match.profit_factor) == (0.25, round(50 / 150, 6))


def test_artifact_hash_is_the_manifest_hash_and_rebuilds_are_identical(universe: list[tuple], data_dir: Path) -> None:
    first = build()
    root = data_dir / first.path
    manifest = json.loads((root / "manifest.json").read_bytes())

    assert hashlib.sha256((root / "manifest.json").read_bytes()).hexdigest() == first.sha256
    assert (root / "manifest.json").read_bytes() == json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    for name, entry in manifest["files"].items():
        assert hashlib.sha256((root / name).read_bytes()).hexdigest() == entry["sha256"]
    assert sorted(p.name for p in root.iterdir()) == sorted([*manifest["files"], "manifest.json"])
    assert manifest["registry"]["count"] == 41
    assert manifest["coverage"]["historical"]["ready_rows"] == 7
    assert manifest["coverage"]["historical"]["label_rows"] == {"5": 7, "15": 0, "30": 0, "60": 0}

    second = build()

    assert second.sha256 == first.sha256
    assert MarketMemoryArtifact.objects.count() == 1


def test_a_tampered_file_is_refused_on_load(universe: list[tuple], data_dir: Path) -> None:
    artifact = build()
    serving = data_dir / artifact.path / "serve.sqlite3"
    data = bytearray(serving.read_bytes())
    data[-1] ^= 0xFF
    serving.write_bytes(bytes(data))

    with pytest.raises(ArtifactRefused, match=r"serve\.sqlite3"):
        MemoryReader(data_dir / artifact.path, artifact.sha256)


@pytest.mark.django_db(transaction=True)
def test_activation_swaps_atomically_under_concurrent_readers(universe: list[tuple]) -> None:
    first = build()
    universe[0] = ("AAA", D1, AB, 4, 400)  # a second artifact: the exact key sums to 370 instead of 70
    second = build()
    expected = {first.sha256: round(70 / 3 / 1_000_000, 10), second.sha256: round(370 / 3 / 1_000_000, 10)}
    seen: list[tuple[str, float]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def read() -> None:
        try:
            while not stop.is_set():
                answer = memory_lookup(symbol="AAA", side="buy", active=AB, regime=4, horizons=(5,))
                seen.append((answer.artifact_sha256, answer.matches[5].average_return_pct))  # type: ignore[union-attr]
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with override_settings(LEROY_MM_RELOAD_SECONDS=0):
        threads = [threading.Thread(target=read) for _ in range(3)]
        for thread in threads:
            thread.start()
        for artifact in (first, second, first, second):
            market_memory_activate(artifact=artifact)
            mark = len(seen)
            while not errors and artifact.sha256 not in {sha for sha, _ in seen[mark:]}:
                pass  # wait until a reader has answered from the newly active artifact
        stop.set()
        for thread in threads:
            thread.join()

    assert errors == []
    assert seen
    assert all(value == expected[sha] for sha, value in seen)
    assert MarketMemoryArtifact.objects.filter(is_active=True).get().sha256 == second.sha256


def test_status_command_prints_the_active_artifact(
    universe: list[tuple], capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    from django.core.management import call_command

    artifact = build()
    call_command("market_memory_status")

    out = json.loads(capsys.readouterr().out)
    assert out == {"version": artifact.version, "sha256": artifact.sha256, "path": str(data_dir / artifact.path)}
    assert Path(out["path"]).is_dir()


def test_build_command_reports_each_symbol_then_each_step_of_the_reduce(universe: list[tuple]) -> None:
    from django.core.management import call_command

    progress = io.StringIO()
    with override_settings(LEROY_MM_MIN_SESSIONS=2):
        call_command("build_market_memory", "--force", stdout=io.StringIO(), stderr=progress)

    lines = [re.sub(r", [\d.]+ s elapsed(, ETA [\d.]+ s)?$", "", line) for line in progress.getvalue().splitlines()]
    assert lines[:3] == ["[1/3] AAA: 5 rows", "[2/3] BBB: 7 rows", "[3/3] IDX: 7 rows"]  # rows so far
    assert [re.sub(r"\d[\d,]*", "N", line) for line in lines[3:]] == [
        "[reduce] candidates: N of N keys may reach the minimum sample, N more in the always-served tables",
        *["[reduce] part N/N (" + side + ", N min): N keys served" for side in ("buy", "sell") for _ in HORIZONS],
        "[reduce] reservoirs: N rows",
    ]
    # The always-served tables (symbol baseline, regime table) are counted apart: they are kept below the minimum.
    keys = MarketMemoryArtifact.objects.get(is_active=True).manifest["keys"]
    pruned, built, always = (int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", lines[3]))
    assert built == sum(k["keys_built"] for k in keys.values())
    assert always == keys["6"]["keys_built"] + keys["7"]["keys_built"]
    assert always == keys["6"]["keys_served"] + keys["7"]["keys_served"]
    assert pruned >= sum(keys[t]["keys_served"] for t in ("1", "2", "3", "4", "5"))
    parts = re.findall(r"part (\d)/8 \((\w+), (\d+) min\)", progress.getvalue())
    assert parts == [
        ("1", "buy", "5"), ("2", "buy", "15"), ("3", "buy", "30"), ("4", "buy", "60"),
        ("5", "sell", "5"), ("6", "sell", "15"), ("7", "sell", "30"), ("8", "sell", "60"),
    ]  # fmt: skip


def test_celery_map_and_reduce_builds_the_same_artifact(
    universe: list[tuple], django_capture_on_commit_callbacks
) -> None:
    in_process = build()
    MarketMemoryArtifact.objects.update(is_active=False)

    with override_settings(LEROY_MM_MIN_SESSIONS=2), django_capture_on_commit_callbacks(execute=True):
        queued = market_memory_build_start()

    queued.refresh_from_db()
    assert (queued.status, queued.partials_done, queued.partials_total) == ("done", 3, 3)
    assert queued.artifact is not None
    assert (queued.artifact.sha256, queued.artifact.is_active) == (in_process.sha256, True)


def test_a_reduce_missing_a_feature_store_file_is_refused_and_writes_no_artifact(
    universe: list[tuple], data_dir: Path
) -> None:
    from evidence.marketdata import store
    from evidence.memory.artifact import feature_store_path

    with override_settings(LEROY_MM_MIN_SESSIONS=2):
        plan = memory.build_plan()
        for ticker in plan.tickers:
            memory.build_symbol_partial(plan, ticker, "builds/missing-feature")
        store.remove([feature_store_path("BBB", plan)])

        with pytest.raises(memory.BuildError, match="feature store file for BBB is missing"):
            memory.reduce_partials(plan, "builds/missing-feature")

    assert not (data_dir / "market_memory").exists()
    assert MarketMemoryArtifact.objects.exists() is False


def test_the_reduce_holds_the_returns_of_one_side_and_horizon_at_a_time(
    universe: list[tuple], monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[set[int]] = []
    candidate_stats = memory._candidate_stats

    def spied(returns: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
        side_horizon = memory._bits("side", "horizon")
        counted.append(set((returns.get_column("key") & side_horizon).to_list()))
        return candidate_stats(returns, candidates)

    monkeypatch.setattr(memory, "_candidate_stats", spied)
    build()
    examples = memory_reader().examples(tier=5, side="buy", symbol="AAA", mask=AB, regime=4)

    buy_5, sell_5 = 0, 1 << memory.KEY_FIELDS["side"][0]  # the side and horizon bits of the parts with returns
    # One call per (side, horizon) part, buy then sell, horizons in order; only the 5-minute labels are mature.
    assert counted == [{buy_5}, set(), set(), set(), {sell_5}, set(), set(), set()]
    assert sorted(row["r_5"] for row in examples) == [-50, 20, 100]


def test_reservoir_regime_and_execution_tables_and_lineage(universe: list[tuple]) -> None:
    artifact = build()
    reader = memory_reader()

    examples = reader.examples(tier=5, side="buy", symbol="AAA", mask=AB, regime=4)
    regimes = {row["regime"]: row for row in reader.regime_table(side="buy", horizon=5)}
    execution = reader.execution_conditions(symbol="AAA")
    lineage = reader.lineage()

    assert sorted(row["r_5"] for row in examples) == [-50, 20, 100]
    assert [row["rank"] for row in examples] == [0, 1, 2]
    assert {row["row_symbol"] for row in examples} == {"AAA"}
    assert all(row["r_15"] is None for row in examples)  # immature labels stay null in examples too
    # regime 4: +100 -50 +30 +20 (AAA) and -40 (BBB); regime 5: +10 (AAA) and +60 (BBB)
    assert (regimes[4]["row_count"], regimes[4]["average_return_pct"]) == (5, 60 / 5 / 1_000_000)
    assert (regimes[5]["row_count"], regimes[5]["distinct_sessions"]) == (2, 2)
    assert execution["volume_by_half_hour"] == [
        {"minutes_from_open": 30, "bars": 5, "sessions": 2, "mean_volume_per_bar": 100.0, "zero_volume_bars": 0}
    ]
    assert execution["spread"] is None
    assert execution["spread_status"] == "absent: the bar data carries no quotes"
    assert lineage["artifact_sha256"] == artifact.sha256
    assert lineage["registry"]["count"] == 41
    assert lineage["calendar"]["lib"] == "exchange_calendars"
    assert lineage["source"] == "vendor"
    assert reader.freshness(at=utc(2026, 7, 1, 15))["status"] == "unavailable"  # the corpus has no overlay

"""The end-of-day engine's rules on hand-made closes, replay statistics recomputed from the legs, and the
walk-forward's refusal to look past its fit year."""

from datetime import date, timedelta
from statistics import median

import numpy as np
import pytest

from evidence.eod import walkforward
from evidence.eod.engine import DEFAULT_PARAMS, EngineParams, engine_sha256, run
from evidence.eod.replay import legs, replay

SMALL = EngineParams(entry_lookback=3, exit_lookback=2, trend_lookback=3)
CLOSES = np.array([10, 10, 10, 12, 13, 11, 11, 14, 15], dtype=float)


def days(n: int, first: date = date(2020, 1, 1)) -> list[date]:
    return [first + timedelta(days=i) for i in range(n)]


def test_the_engine_enters_above_the_buy_line_and_exits_below_the_sell_line():
    result = run(CLOSES, SMALL)

    assert result.action == ["STAY_FLAT", "STAY_FLAT", "STAY_FLAT", "ENTER", "HOLD", "EXIT", "STAY_FLAT", "ENTER",
                             "HOLD"]  # fmt: skip
    assert result.recommended == ["FLAT", "FLAT", "FLAT", "LONG", "LONG", "FLAT", "FLAT", "LONG", "LONG"]
    assert np.isnan(result.buy_line[1]) and result.buy_line[2] == 10.0
    assert (result.buy_line[4], result.sell_line[4]) == (13.0, 12.0)


def test_on_an_exit_session_the_confirmed_state_still_reads_long_while_action_is_exit_and_target_zero():
    result = run(CLOSES, SMALL)

    assert CLOSES[5] < result.sell_line[4]  # crossed the sell line published at the previous close
    assert (result.state[5], result.action[5], result.recommended[5]) == ("LONG", "EXIT", "FLAT")
    assert result.position()[5] == 0.0
    assert result.state[6] == "FLAT"  # the closing-bar transition is recorded from the next session


def test_legs_include_the_losing_leg_and_mark_the_open_leg_to_the_last_close():
    found = legs(days(9), CLOSES, run(CLOSES, SMALL))

    assert [(leg.entry_price, leg.exit_price, leg.holding_days, leg.open) for leg in found] == [
        (12.0, 11.0, 2, False),
        (14.0, None, 1, True),
    ]
    assert [leg.return_pct for leg in found] == [round(11 / 12 - 1, 6), round(15 / 14 - 1, 6)]


def test_no_action_before_the_warm_up_is_complete():
    rising = np.arange(1, 60, dtype=float)

    result = run(rising, DEFAULT_PARAMS)

    assert set(result.action[: DEFAULT_PARAMS.warmup]) == {"STAY_FLAT"}
    assert result.action[DEFAULT_PARAMS.warmup] == "ENTER"


def test_the_engine_is_causal_a_prefix_run_is_the_prefix_of_the_run():
    closes = 100 * np.exp(np.cumsum(np.random.default_rng(1).normal(0, 0.02, 400)))

    whole, part = run(closes, DEFAULT_PARAMS), run(closes[:250], DEFAULT_PARAMS)

    assert whole.action[:250] == part.action and whole.state[:250] == part.state


def test_the_engine_hash_names_version_and_every_parameter():
    assert engine_sha256(DEFAULT_PARAMS) == engine_sha256(EngineParams())
    assert engine_sha256(DEFAULT_PARAMS) != engine_sha256(EngineParams(exit_lookback=11))
    with pytest.raises(ValueError):
        EngineParams(entry_lookback=1)


def test_replay_statistics_recompute_from_the_legs():
    closes = 50 * np.exp(np.cumsum(np.random.default_rng(5).normal(0.0003, 0.02, 900)))
    sessions = days(900)

    replayed = replay(sessions, closes, DEFAULT_PARAMS)

    closed = [leg for leg in replayed.legs if not leg.open]
    # A caller recomputes from the legs as published: each return is its exit over entry close, to 6 digits.
    returns = [leg.return_pct for leg in closed]
    assert all(abs(leg.return_pct - (leg.exit_price / leg.entry_price - 1)) <= 5e-7 for leg in closed)  # type: ignore[operator]
    gains, losses = sum(r for r in returns if r > 0), -sum(r for r in returns if r < 0)
    summary = replayed.summary
    assert len(closed) > 5
    assert summary["closed_legs"] == len(closed)
    assert summary["win_rate"] == round(sum(1 for r in returns if r > 0) / len(returns), 6)
    assert summary["average_return"] == pytest.approx(sum(returns) / len(returns), abs=1e-6)
    assert summary["median_return"] == pytest.approx(median(returns), abs=1e-6)
    assert summary["profit_factor"] == round(gains / losses, 6)
    # Held from each entry close up to the exit close; equity compounds only while held.
    index = {day: i for i, day in enumerate(sessions)}
    held = np.zeros(900, dtype=bool)
    for leg in replayed.legs:
        held[index[leg.entry_date] : index[leg.exit_date] if leg.exit_date else 900] = True
    equity, peak, worst = 1.0, 1.0, 0.0
    for t in range(1, 900):
        if held[t - 1]:
            equity *= closes[t] / closes[t - 1]
        peak = max(peak, equity)
        worst = max(worst, 1 - equity / peak)
    assert summary["max_drawdown"] == pytest.approx(worst, abs=1e-6)
    assert summary["exposure"] == pytest.approx(held.mean(), abs=1e-6)


def test_walk_forward_choices_never_see_data_after_their_fit_year():
    sessions = [date(2015, 1, 2) + timedelta(days=i) for i in range(0, 365 * 8, 1) if (i % 7) < 5]
    rng = np.random.default_rng(9)
    closes = 80 * np.exp(np.cumsum(rng.normal(0.0004, 0.018, len(sessions))))
    perturbed = closes.copy()
    later = np.array([day.year >= 2020 for day in sessions])
    perturbed[later] = perturbed[later] * np.exp(np.cumsum(rng.normal(-0.002, 0.03, later.sum())))

    original = walkforward.walk_forward(sessions, closes, 2017, 2022)
    changed = walkforward.walk_forward(sessions, perturbed, 2017, 2022)

    assert [row["year"] for row in original] == [2017, 2018, 2019, 2020, 2021, 2022]
    assert [r for r in original if r["year"] < 2020] == [r for r in changed if r["year"] < 2020]
    assert [r for r in original if r["year"] >= 2020] != [r for r in changed if r["year"] >= 2020]
    first_choice_after = next(r for r in changed if r["year"] == 2020)
    assert first_choice_after["chosen_variant"] == next(r for r in original if r["year"] == 2020)["chosen_variant"]
    assert all(row["fit_through"] == f"{row['year'] - 1}-12-31" for row in original)

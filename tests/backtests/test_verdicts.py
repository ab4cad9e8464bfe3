import itertools
import math

import numpy as np
import pytest
from scipy import stats

from backtests import verdicts

THRESHOLDS = verdicts.Thresholds(min_deflated_sharpe=0.95, max_pbo=0.5, min_trades=30)


def test_deflated_sharpe_reproduces_the_papers_worked_example():
    # Bailey & López de Prado (2014), section 4: 100 trials with annualised Sharpe variance 1/2, a best annualised
    # Sharpe of 2.5 over 5 years of daily returns (T = 1250), skewness -3, kurtosis 10: SR0 = 0.1132, DSR = 0.9004.
    benchmark = verdicts.expected_max_sharpe(100, 0.5 / 250)
    observed = verdicts.Moments(sharpe=2.5 / math.sqrt(250), skewness=-3.0, kurtosis=10.0, observations=1250)

    assert round(benchmark, 4) == 0.1132
    assert round(verdicts.probabilistic_sharpe(observed, benchmark), 4) == 0.9004


def test_psr_and_dsr_agree_with_an_independent_scipy_recomputation():
    returns = np.random.default_rng(5).standard_t(df=5, size=500) * 0.01 + 0.0008
    block = verdicts.deflated_sharpe(returns.tolist(), trials=40, trial_sharpe_variance=0.0009)

    sr = returns.mean() / returns.std(ddof=1)
    skew, kurt = stats.skew(returns), stats.kurtosis(returns, fisher=False)
    gamma = np.euler_gamma
    sr0 = math.sqrt(0.0009) * ((1 - gamma) * stats.norm.ppf(1 - 1 / 40) + gamma * stats.norm.ppf(1 - 1 / (40 * math.e)))
    spread = math.sqrt(1 - skew * sr + (kurt - 1) / 4 * sr**2)
    assert block["sharpe"] == pytest.approx(sr, rel=1e-12)
    assert (block["skewness"], block["kurtosis"]) == (pytest.approx(skew, rel=1e-9), pytest.approx(kurt, rel=1e-9))
    assert block["kurtosis"] > 3  # not excess kurtosis: fat-tailed returns sit above the normal's 3
    assert block["probabilistic_sharpe"] == pytest.approx(stats.norm.cdf(sr * math.sqrt(499) / spread), rel=1e-9)
    assert block["value"] == pytest.approx(stats.norm.cdf((sr - sr0) * math.sqrt(499) / spread), rel=1e-9)
    assert (block["trials"], block["trial_sharpe_variance"], block["observations"]) == (40, 0.0009, 500)


def test_one_trial_deflates_nothing_and_flat_returns_have_no_sharpe():
    returns = (np.random.default_rng(2).normal(0.001, 0.01, 200)).tolist()
    once = verdicts.deflated_sharpe(returns, trials=1, trial_sharpe_variance=None)
    assert once["value"] == once["probabilistic_sharpe"]

    flat = verdicts.deflated_sharpe([0.0] * 50, trials=3, trial_sharpe_variance=0.01)
    assert (flat["value"], flat["sharpe"], flat["kurtosis"], flat["observations"]) == (None, None, None, 50)


def brute_force_pbo(matrix: np.ndarray, blocks: int) -> float:
    """CSCV written out loop by loop, as the paper states it, for a small S."""
    size = len(matrix) // blocks
    parts = np.split(matrix[len(matrix) - size * blocks :], blocks)
    below = 0
    combos = list(itertools.combinations(range(blocks), blocks // 2))
    for chosen in combos:
        train = np.vstack([parts[i] for i in chosen])
        test = np.vstack([parts[i] for i in range(blocks) if i not in chosen])
        is_sr = train.mean(0) / train.std(0, ddof=1)
        oos_sr = test.mean(0) / test.std(0, ddof=1)
        n_star = int(np.argmax(is_sr))
        rank = stats.rankdata(oos_sr)[n_star]
        omega = rank / (matrix.shape[1] + 1)
        below += math.log(omega / (1 - omega)) <= 0
    return below / len(combos)


def test_cscv_matches_a_loop_by_loop_recomputation():
    matrix = np.random.default_rng(9).normal(0.0, 0.01, (63, 5))  # 63 rows: the oldest 3 are dropped for S = 6

    result = verdicts.cscv(matrix, blocks=6)

    assert (result["blocks"], result["combinations"], result["grid_points"], result["observations"]) == (6, 20, 5, 60)
    assert result["value"] == pytest.approx(brute_force_pbo(matrix, 6))
    assert verdicts.cscv(matrix, blocks=6) == result  # deterministic


def test_pure_noise_grids_overfit_and_a_planted_edge_does_not():
    rng = np.random.default_rng(3)
    noise = [verdicts.cscv(rng.normal(0.0, 0.01, (160, 10)))["value"] for _ in range(8)]
    # Built to overfit: every variant has exactly zero mean over the period, so in-sample luck reverts out of sample.
    raw = rng.normal(0.0, 0.01, (160, 10))
    centred = verdicts.cscv(raw - raw.mean(axis=0))
    edge = rng.normal(0.0, 0.01, (160, 10))
    edge[:, 4] += 0.004  # one variant with a real drift
    planted = verdicts.cscv(edge)

    assert 0.35 <= float(np.mean(noise)) <= 0.65  # ≈ 0.5 on average over noise grids
    assert centred["value"] >= 0.5
    assert centred["degradation_slope"] < 0
    assert planted["value"] <= 0.05
    assert planted["logit"]["median"] > 0
    assert planted["combinations"] == math.comb(16, 8)


def test_cscv_refuses_a_grid_or_period_too_small():
    with pytest.raises(verdicts.CscvRefused, match="1 completed point"):
        verdicts.cscv(np.zeros((200, 1)))
    with pytest.raises(verdicts.CscvRefused, match="has 40 observations; 16 blocks need at least 80"):
        verdicts.cscv(np.ones((40, 3)), min_block_observations=5)
    with pytest.raises(verdicts.CscvRefused, match="even"):
        verdicts.cscv(np.ones((40, 3)), blocks=5)


def test_cscv_of_points_that_all_have_the_same_returns_is_refused_not_a_pbo_of_one():
    column = np.random.default_rng(3).normal(0, 0.01, 320)
    same = np.column_stack([column] * 4)
    one_differs = same.copy()
    one_differs[:, 3] = np.random.default_rng(4).normal(0, 0.01, 320)

    with pytest.raises(verdicts.CscvRefused, match="All 4 completed points have the same returns"):
        verdicts.cscv(same)
    assert 0.0 <= verdicts.cscv(one_differs)["value"] <= 1.0  # partial ties keep their average rank


def test_cscv_of_each_points_block_sums_is_cscv_of_the_matrix_bit_for_bit():
    rng = np.random.default_rng(5)
    days = [f"2024-{month:02d}-{day:02d}" for month in range(1, 13) for day in range(1, 29)][:331]
    series = [[[day, float(value)] for day, value in zip(days, rng.normal(0.0, 0.01, len(days)), strict=True)]
              for _ in range(7)]  # fmt: skip
    records = [verdicts.return_blocks(points, 16) for points in series]

    assert records[0]["observations"] == 331 and len(records[0]["sums"]) == 16  # 331 = 16 x 20 + 11 dropped
    assert verdicts.blocks_align(records, 16)
    assert not verdicts.blocks_align(records, 8)
    assert verdicts.cscv_of_blocks(records) == verdicts.cscv(verdicts.returns_matrix(series), blocks=16)


def test_return_blocks_of_a_series_out_of_order_or_with_a_repeated_day_are_those_of_its_matrix_column():
    rng = np.random.default_rng(11)
    days = [f"2024-{month:02d}-{day:02d}" for month in range(1, 13) for day in range(1, 29)][:100]
    ordered = [[day, float(value)] for day, value in zip(days, rng.normal(0.0, 0.01, 100), strict=True)]
    shuffled = [ordered[i] for i in rng.permutation(100)]
    repeated = [*ordered, [days[40], 0.5]]  # the last return of a day is the one the matrix keeps

    for series in (ordered, shuffled, repeated):
        sums, squares = verdicts.block_sums(verdicts.returns_matrix([series])[:, 0], 16)
        record = verdicts.return_blocks(series, 16)
        assert (record["observations"], record["sums"], record["squares"]) == (100, sums.tolist(), squares.tolist())
    assert verdicts.return_blocks(shuffled, 16) == verdicts.return_blocks(ordered, 16)
    assert verdicts.return_blocks(repeated, 16)["days"] == verdicts.return_blocks(ordered, 16)["days"]


def test_return_blocks_read_a_str_subclass_day_and_an_int_or_bool_return_as_the_matrix_does():
    class Day(str):
        pass

    days = [f"2024-{month:02d}-{day:02d}" for month in range(1, 13) for day in range(1, 29)][:40]
    floats = [[day, float(i % 3 == 0)] for i, day in enumerate(days)]
    mixed = [[Day(day), (i % 3 == 0) if i % 2 else int(i % 3 == 0)] for i, day in enumerate(days)]

    assert {type(value) for _, value in mixed} == {bool, int}
    assert verdicts.return_blocks(mixed, 16) == verdicts.return_blocks(floats, 16)
    assert verdicts.return_blocks(floats, 16)["sums"][0] == 1.0


def test_return_blocks_are_none_for_a_series_with_fewer_days_than_blocks_or_a_day_that_is_not_a_string():
    assert verdicts.return_blocks([["2024-01-02", 0.1], ["2024-01-03", 0.2]], 16) is None
    assert verdicts.return_blocks([[20240100 + day, 0.01] for day in range(1, 20)], 16) is None
    assert verdicts.return_blocks([[f"2024-01-{day:02d}", 0.01] for day in range(1, 20)], 16)["observations"] == 19
    assert not verdicts.blocks_align([None, None], 16)


def test_returns_matrix_aligns_points_on_the_union_of_days():
    matrix = verdicts.returns_matrix([[["2024-01-02", 0.1], ["2024-01-03", 0.2]], [["2024-01-03", -0.1]]])
    assert matrix.tolist() == [[0.1, 0.0], [0.2, -0.1]]


def deflated(value: float | None, trials: int = 5) -> dict:
    return {"value": value, "trials": trials}


@pytest.mark.parametrize(
    ("dsr", "pbo", "lookahead", "trades", "status", "codes"),
    [
        (0.99, 0.1, "passed", 40, "robust", []),
        (0.90, 0.1, "passed", 40, "fragile", ["deflated_sharpe"]),
        (0.99, 0.6, "passed", 40, "overfit", ["pbo"]),
        (0.99, None, "failed", 40, "overfit", ["lookahead"]),
        (0.99, None, "passed", 12, "insufficient_evidence", ["trades"]),
        (0.90, 0.7, "failed", 12, "overfit", ["lookahead", "pbo", "trades", "deflated_sharpe"]),
        (None, None, "not_run", 40, "insufficient_evidence", ["lookahead_not_run", "deflated_sharpe_undefined"]),
    ],
)
def test_verdict_status_follows_the_thresholds(dsr, pbo, lookahead, trades, status, codes):
    block = None if pbo is None else {"value": pbo}
    result = verdicts.verdict(
        deflated=deflated(dsr), pbo=block, pbo_refusal=None, lookahead=lookahead, trades=trades, thresholds=THRESHOLDS
    )
    assert (result["status"], [r["code"] for r in result["reasons"]]) == (status, codes)
    assert result["thresholds"] == {
        "LEROY_VERDICT_MIN_DEFLATED_SHARPE": 0.95, "LEROY_VERDICT_MAX_PBO": 0.5, "LEROY_VERDICT_MIN_TRADES": 30,
    }  # fmt: skip
    assert "not investment advice" in result["note"]


@pytest.mark.parametrize(("drawdown", "status"), [(99.99, "robust"), (100.0, "insufficient_evidence")])
def test_an_account_value_that_reached_zero_leaves_no_evidence_whatever_its_ratios(drawdown, status):
    result = verdicts.verdict(
        deflated=deflated(0.99), pbo={"value": 0.1}, pbo_refusal=None, lookahead="passed", trades=40,
        thresholds=THRESHOLDS, max_drawdown_pct=drawdown,
    )  # fmt: skip

    assert result["status"] == status
    assert result["reasons"] == (
        []
        if drawdown < 100
        else [
            {
                "code": "account_value_not_positive",
                "message": "The account value fell to zero or below (maximum drawdown 100.00 %): its returns and "
                "ratios are not meaningful.",
            }
        ]
    )


def test_verdict_messages_state_each_limit_and_the_setting_that_holds_it():
    result = verdicts.verdict(
        deflated=deflated(0.90), pbo={"value": 0.7}, pbo_refusal=None, lookahead="passed", trades=12,
        thresholds=THRESHOLDS,
    )  # fmt: skip

    assert [reason["message"] for reason in result["reasons"]] == [
        "PBO 0.700 is above the limit of 0.5 (LEROY_VERDICT_MAX_PBO).",
        "12 trades, fewer than the 30 required (LEROY_VERDICT_MIN_TRADES).",
        f"Deflated Sharpe 0.900 over {result['deflated_sharpe']['trials']} trials is below the 0.95 required "
        "(LEROY_VERDICT_MIN_DEFLATED_SHARPE).",
    ]

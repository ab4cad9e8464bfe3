import pytest

from evidence.research.geometry import InvalidSetup, setup_geometry


def test_buy_geometry_from_the_contract_example():
    geometry = setup_geometry(side="buy", entry=212.34, stop=209, target=218)

    assert geometry.risk_per_share == 3.34
    assert geometry.reward_per_share == 5.66
    assert geometry.reward_to_risk == 1.6946


def test_sell_geometry_mirrors_the_direction():
    geometry = setup_geometry(side="sell", entry=100.0, stop=102.0, target=95.0)

    assert (geometry.risk_per_share, geometry.reward_per_share, geometry.reward_to_risk) == (2.0, 5.0, 2.5)


def test_ratio_only_when_both_levels_exist():
    geometry = setup_geometry(side="buy", entry=100.0, stop=98.0, target=None)

    assert (geometry.risk_per_share, geometry.reward_per_share, geometry.reward_to_risk) == (2.0, None, None)


def test_no_levels_means_no_geometry():
    assert setup_geometry(side="buy", entry=None, stop=None, target=None) is None


def test_without_entry_nothing_is_inferred():
    geometry = setup_geometry(side="buy", entry=None, stop=98.0, target=104.0)

    assert (geometry.risk_per_share, geometry.reward_per_share, geometry.reward_to_risk) == (None, None, None)


def test_both_sides_echo_levels_only():
    geometry = setup_geometry(side="both", entry=100.0, stop=98.0, target=104.0)

    assert geometry.model_dump() == {
        "entry_price": 100.0,
        "stop_price": 98.0,
        "target_price": 104.0,
        "risk_per_share": None,
        "reward_per_share": None,
        "reward_to_risk": None,
    }


@pytest.mark.parametrize(("side", "stop", "target"), [("buy", 101.0, 104.0), ("buy", 98.0, 99.0), ("sell", 99.0, 95.0)])
def test_levels_against_the_direction_are_refused(side, stop, target):
    with pytest.raises(InvalidSetup):
        setup_geometry(side=side, entry=100.0, stop=stop, target=target)


def test_levels_closer_than_the_kept_decimals_are_refused_saying_so():
    with pytest.raises(InvalidSetup) as refused:
        setup_geometry(side="buy", entry=100.0000004, stop=100.0000001, target=None)

    assert refused.value.message == (
        "a buy stop must lie below the entry price by at least 0.000001 (prices are compared to 6 decimals)"
    )


def test_levels_whose_reward_to_risk_is_not_finite_are_refused_saying_so():
    with pytest.raises(InvalidSetup) as refused:
        setup_geometry(side="buy", entry=1.0, stop=0.999999, target=1.7e308)

    assert refused.value.code == "invalid_setup"
    assert refused.value.message == (
        "the price levels give a risk, reward or reward-to-risk too large to state as a finite number"
    )

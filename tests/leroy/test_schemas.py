import math
import typing

import pytest
from pydantic import BaseModel

from backtests.schemas import RunOptimizationArgs
from leroy.errors import DomainError
from leroy.mcp.registry import load_tools

OPTIMIZATION = {
    "strategy_id": "s",
    "name": "n",
    "data_ids": ["2"],
    "frequency": "1d",
    "start_date": "2017-01-03",
    "end_date": "2026-05-19",
    "grids": [{"name": "fast", "min": 5, "max": 25, "step": 5}],
    "target_metric": "annualized_sharpe_ratio",
    "target_direction": "maximize",
}


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_a_non_finite_number_in_nested_arguments_is_refused_at_its_field(value):
    arguments = OPTIMIZATION | {"grids": [{"name": "fast", "min": 5, "max": value, "step": 5}]}

    with pytest.raises(DomainError) as refused:
        RunOptimizationArgs.from_arguments(arguments)

    assert refused.value.code == "invalid_arguments"
    assert refused.value.details["problems"] == [
        {"field": "grids.0.max", "problem": "Input should be a valid integer or Input should be a finite number"}
    ]


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**63])
def test_an_integer_json_cannot_carry_exactly_is_refused_in_nested_arguments(value):
    arguments = OPTIMIZATION | {"grids": [{"name": "fast", "min": value, "max": 25, "step": 5}]}

    with pytest.raises(DomainError) as refused:
        RunOptimizationArgs.from_arguments(arguments)

    # Refused at the argument holding it, as text a database cannot keep is.
    assert refused.value.details["problems"] == [
        {
            "field": "grids",
            "problem": "Value error, integers must lie between -9007199254740991 and 9007199254740991",
        }
    ]


def test_the_integers_json_carries_exactly_are_taken_to_their_ends():
    for value in (2**53 - 1, -(2**53 - 1)):
        arguments = OPTIMIZATION | {"grids": [{"name": "fast", "min": value, "max": value, "step": 1}]}

        assert RunOptimizationArgs.from_arguments(arguments).grids[0].min == value


def _models(annotation: object) -> list[type[BaseModel]]:
    """The argument models an annotation holds, however nested in lists, unions and optionals."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for part in typing.get_args(annotation) for model in _models(part)]


def test_every_tools_arguments_refuse_non_finite_numbers_at_every_depth():
    seen: set[type[BaseModel]] = set()
    pending: list[type[BaseModel]] = [spec.args for spec in load_tools().values()]
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        assert model.model_config.get("allow_inf_nan") is False, model.__name__
        pending += [nested for field in model.model_fields.values() for nested in _models(field.annotation)]

    assert RunOptimizationArgs in seen and len(seen) > 40

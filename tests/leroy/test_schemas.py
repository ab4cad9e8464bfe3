import json
import math
import re
import typing

import pytest
from pydantic import BaseModel

from backtests.schemas import RunOptimizationArgs
from leroy.errors import DomainError
from leroy.mcp.registry import load_tools
from leroy.schemas import json_loads, visible_name, visible_text

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


def test_a_name_given_twice_in_a_parsed_body_is_refused_at_its_field_at_any_depth():
    grid = '{"name": "fast", "min": 5, "min": 6, "max": 25, "step": 5}'
    body = json.dumps(OPTIMIZATION | {"grids": []}).replace('"grids": []', f'"grids": [{grid}], "name": "m"')

    with pytest.raises(DomainError) as refused:
        RunOptimizationArgs.from_arguments(json_loads(body))

    problem = "Given more than once (a name may appear once in a JSON object)"
    assert refused.value.details["problems"] == [
        {"field": "name", "problem": problem},
        {"field": "grids.0.min", "problem": problem},
    ]
    assert RunOptimizationArgs.from_arguments(json_loads(json.dumps(OPTIMIZATION))).name == "n"


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**63])
def test_an_integer_json_cannot_carry_exactly_is_refused_at_its_nested_field(value):
    arguments = OPTIMIZATION | {"grids": [{"name": "fast", "min": value, "max": 25, "step": 5}]}

    with pytest.raises(DomainError) as refused:
        RunOptimizationArgs.from_arguments(arguments)

    assert refused.value.details["problems"] == [
        {
            "field": "grids.0.min",
            "problem": "Value error, integers must lie between -9007199254740991 and 9007199254740991",
        }
    ]


def test_text_no_database_keeps_is_refused_at_its_nested_field():
    arguments = OPTIMIZATION | {"grids": [{"name": "fa\x00st", "min": 5, "max": 25, "step": 5}]}

    with pytest.raises(DomainError) as refused:
        RunOptimizationArgs.from_arguments(arguments)

    assert refused.value.details["problems"] == [
        {"field": "grids.0.name", "problem": "Value error, text must not contain NUL characters or lone surrogates"}
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


def test_every_tools_arguments_refuse_non_finite_numbers_and_hold_no_free_form_object_at_every_depth():
    # The storable check leaves objects to the nested models they become: a free-form object argument (a dict or
    # Any) would escape it.
    seen: set[type[BaseModel]] = set()
    pending: list[type[BaseModel]] = [spec.args for spec in load_tools().values()]
    while pending:
        model = pending.pop()
        if model in seen:
            continue
        seen.add(model)
        assert model.model_config.get("allow_inf_nan") is False, model.__name__
        for name, field in model.model_fields.items():
            assert not {"dict", "Any", "object"} & set(re.findall(r"\w+", str(field.annotation))), (model, name)
            pending += _models(field.annotation)

    assert RunOptimizationArgs in seen and len(seen) > 40


@pytest.mark.parametrize("text", ["a", "é", "e\u0301", "\u200bx", "名", "\u202eabc"])
def test_text_with_one_visible_character_is_kept_unchanged(text):
    assert visible_text(text) == text


@pytest.mark.parametrize("text", ["", " \t\n", "\u00a0\u3000", "\u200b\u200d\ufeff", "\u202e\u0301", "\x01\u0301"])
def test_text_of_whitespace_format_control_or_combining_characters_alone_is_refused(text):
    with pytest.raises(ValueError) as refused:
        visible_text(text)

    assert str(refused.value) == "must not be blank"


@pytest.mark.parametrize("name", ["agent", "\u05e9\u05dc\u05d5\u05dd", "a\u200fb", "\u200bx"])
def test_a_name_with_a_visible_character_and_no_bidi_control_is_kept_unchanged(name):
    assert visible_name(name) == name


@pytest.mark.parametrize("control", [chr(c) for c in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]])
def test_a_name_holding_a_bidi_embedding_override_or_isolate_is_refused(control):
    with pytest.raises(ValueError) as refused:
        visible_name(f"key{control}gnp.exe")

    assert str(refused.value) == "must not contain bidirectional control characters"


def test_a_note_keeps_the_bidi_isolates_around_its_right_to_left_words():
    note = "note \u2067\u05e9\u05dc\u05d5\u05dd\u2069"

    assert visible_text(note) == note

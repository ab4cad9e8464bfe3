"""The seed contract (seeds/leroy-mcp.md) walked against our schemas: same field names, same enum spellings."""

import json
from pathlib import Path
from typing import Any

from evidence.schemas import EvaluateArgs, EvaluationOut

CONTRACT = Path(__file__).resolve().parents[1] / "contract"


def load(name: str) -> Any:
    return json.loads((CONTRACT / f"{name}.json").read_text())


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref and pick the object branch of nullable anyOf."""
    while True:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].split("/")[-1]]
        elif "anyOf" in node:
            node = next((n for n in node["anyOf"] if n.get("type") != "null"), node["anyOf"][0])
        else:
            return node


def missing_paths(schema: dict[str, Any], node: dict[str, Any], value: Any, path: str) -> list[str]:
    node = resolve(schema, node)
    if isinstance(value, dict):
        properties = node.get("properties", {})
        if not properties and node.get("additionalProperties"):
            return []
        out = []
        for key, item in value.items():
            if key not in properties:
                out.append(f"{path}.{key}")
            else:
                out += missing_paths(schema, properties[key], item, f"{path}.{key}")
        return out
    if isinstance(value, list) and value and "items" in node:
        return [p for item in value for p in missing_paths(schema, node["items"], item, f"{path}[]")]
    return []


def test_every_field_of_the_seed_response_is_in_our_output_schema():
    schema = EvaluationOut.model_json_schema()

    assert missing_paths(schema, schema, load("evaluate_response"), "$") == []


def test_seed_response_example_validates_against_our_output_model():
    example = load("evaluate_response")

    parsed = EvaluationOut.model_validate(example)

    assert parsed.status == "no_comparable_sample"
    assert parsed.historical_evidence[0].sample_size is None
    assert parsed.model_dump(mode="json", include={"research_boundary"}) == {
        "research_boundary": example["research_boundary"]
    }


def test_seed_request_example_is_a_valid_request():
    args = EvaluateArgs.model_validate(load("evaluate_request"))

    assert args.holding_horizons == [5, 15, 30, 60]
    assert set(load("evaluate_request")) <= set(EvaluateArgs.model_json_schema()["properties"])


def test_status_and_presentation_enums_are_spelled_as_the_contract():
    schema = EvaluationOut.model_json_schema()
    defs = schema["$defs"]

    assert set(schema["properties"]["status"]["enum"]) == {
        "evaluated",
        "no_comparable_sample",
        "unavailable",
        "stale_frame",
    }
    assert set(defs["Presentation"]["properties"]["format"]["enum"]) == {"markdown", "plain_text"}
    assert "market_closed" in defs["Presentation"]["properties"]["state"]["enum"]
    assert set(defs["MatchStrength"]["properties"]["tier"]["enum"]) == {
        "exact_setup",
        "cross_ticker_setup",
        "signal_pattern",
        "contextual_analogue",
        "direction_only_baseline",
        "no_comparable_evidence",
    }
    assert set(defs["OverlayFreshness"]["properties"]["status"]["enum"]) == {
        "current",
        "behind",
        "unavailable",
        "unknown",
    }

"""`manage.py server_json` emits a server.json that the MCP registry's published schema (vendored) accepts."""

import json
from io import StringIO
from pathlib import Path

import jsonschema
from django.core.management import call_command

SCHEMA = json.loads((Path(__file__).parent / "data" / "server.schema.json").read_text())


def emitted() -> dict:
    out = StringIO()
    call_command("server_json", stdout=out)
    return json.loads(out.getvalue())


def test_server_json_is_valid_against_the_registry_schema_and_names_the_remote(settings):
    settings.LEROY_PUBLIC_ORIGIN = "https://leroy.example.com"

    document = emitted()

    jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(document)
    assert document["$schema"] == SCHEMA["$id"]
    assert document["name"] == "com.example.leroy/leroy"
    [remote] = document["remotes"]
    assert (remote["type"], remote["url"]) == ("streamable-http", "https://leroy.example.com/api/mcp")
    [header] = remote["headers"]
    assert (header["name"], header["isSecret"], header["isRequired"]) == ("Authorization", True, False)
    assert "https://leroy.example.com/.well-known/oauth-protected-resource/api/mcp" in header["description"]
    assert "https://leroy.example.com/account/" in header["description"]


def test_the_schema_refuses_what_the_registry_refuses():
    document = emitted()
    validator = jsonschema.Draft7Validator(SCHEMA)

    assert validator.is_valid(document)
    assert not validator.is_valid({**document, "name": "no-namespace"})
    assert not validator.is_valid({**document, "description": "x" * 101})
    assert not validator.is_valid({**document, "remotes": [{"type": "streamable-http"}]})

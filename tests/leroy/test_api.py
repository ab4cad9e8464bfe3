"""The REST mirror is generated from the tool registry: every REST tool has a route giving the tool's own answer."""

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
import time_machine
from django.test import Client

from billing.models import UsageEvent
from evidence.models import Symbol
from leroy.errors import DomainError
from leroy.mcp.registry import load_tools
from leroy.schemas import MAX_JSON_DEPTH
from tests.calls import call_tool

TOKEN = "a" * 32  # a valid unmasked CSRF secret, set as both cookie and header
# Fields that differ between two calls by design: a fresh id and its receipt, the running usage, a snapshot instant.
VOLATILE = {"evaluation_id", "usage", "snapshot_at", "presentation", "receipt"}
MISSING = "999999"


def sample_arguments(symbol_id: str) -> dict[str, dict[str, Any]]:
    """Arguments for every REST tool: real data where the test world has it, unknown ids where it has none."""
    setup = {"symbol": "ALFA", "side": "buy", "horizon_minutes": 15}
    return {
        "get_usage": {},
        "get_credit_usage": {},
        "evaluate_current_setup": {"symbol": "ALFA", "side": "both"},
        "get_current_confluence_leaders": {"side": "buy"},
        "search_market_memory": {"side": "buy", "horizon_minutes": 5},
        "compare_historical_analogues": setup,
        "explain_setup_failure": setup,
        "compare_against_benchmark": setup,
        "simulate_exit_policy": {**setup, "stop_bps": 50, "target_bps": 50},
        "get_market_regime": {"side": "sell", "horizon_minutes": 30},
        "estimate_execution_conditions": {"symbol": "ALFA"},
        "get_data_lineage": {},
        "record_research_hypothesis": {"symbol": "ALFA", "side": "buy", "horizon_minutes": 5, "note": "n",
                                       "client_request_id": "rest-twin"},
        "review_hypothesis_outcome": {"hypothesis_id": 999999},
        "get_strategy_documentation": {},
        "list_strategies": {},
        "get_strategy": {"id": MISSING},
        "list_symbols": {},
        "search_symbols_by_name": {"symbolName": "alf"},
        "get_symbol": {"id": symbol_id},
        "get_market_data_sample": {"id": symbol_id, "frequency": "1d", "limit": 5},
        "list_reports": {},
        "get_report": {"id": MISSING},
        "list_report_trades": {"id": MISSING},
        "wait_for_reports": {"report_ids": [MISSING]},
        "list_optimizations": {},
        "get_optimization": {"id": MISSING},
        "get_latest_optimization_by_strategy": {"strategy_id": MISSING},
        "wait_for_optimization": {"id": MISSING},
        "list_optimization_results": {"id": MISSING},
        "get_walk_forward_optimization": {"id": MISSING},
        "get_log_checkpoint": {},
        "get_log_consistency_proof": {"first": 0},
        "get_log_inclusion_proof": {"index": 0},
        "get_answer_proof": {"evaluation_id": "eval_missing"},
        "get_historical_replay": {"symbol": "ALFA", "limit": 5},
        "get_heldout_evidence": {},
        "get_walk_forward_evidence": {"symbol": "ALFA"},
        "list_publication_commitments": {},
        "get_publication_maturity": {},
        "get_provenance": {},
        "get_signal": {"symbol": "ALFA"},
        "get_frozen_forward_rows": {},
        "get_forward_changes_since": {"publication_id": 0},
        "list_evidence_alerts": {},
        "list_alert_deliveries": {},
    }  # fmt: skip


def rest_specs() -> list[str]:
    return sorted(
        name for name, spec in load_tools().items() if spec.rest and not spec.handler.__module__.startswith("tests.")
    )


def stable(answer: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in answer.items() if key not in VOLATILE}


@pytest.fixture
def browser(owner) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    client.cookies["csrftoken"] = TOKEN
    return client


def test_every_read_tool_has_a_rest_route_and_the_code_runner_none():
    paths = Client().get("/api/v1/openapi.json").json()["paths"]
    specs = load_tools()

    assert {p.rsplit("/", 1)[1] for p in paths if not p.startswith("/api/v1/tests/")} == set(rest_specs())
    assert {n for n, s in specs.items() if s.read_only and not n.startswith("probe")} - set(rest_specs()) == set()
    assert "run_dry_run_backtest" not in rest_specs()  # it runs agent code: a write, MCP only
    assert set(sample_arguments("1")) == set(rest_specs())


@pytest.mark.django_db(transaction=True)
def test_each_rest_route_gives_the_same_answer_as_its_tool(fed_world, browser, owner):
    symbol_id = str(Symbol.objects.get(ticker="ALFA").pk)
    for name, arguments in sample_arguments(symbol_id).items():
        spec = load_tools()[name]
        app = spec.handler.__module__.split(".")[0]
        path = f"/api/v1/{app}/{name}"
        if spec.args.model_fields:
            response = browser.post(path, arguments, content_type="application/json", headers={"X-CSRFToken": TOKEN})
        else:
            response = browser.get(path)
        try:
            direct: Any = call_tool(owner, name, spec.args.model_validate(arguments)).model_dump(mode="json")
            status = 200
        except DomainError as refusal:
            direct, status = refusal.payload(), None
        body = response.json()
        if status is None:
            assert response.status_code in (400, 404), (name, response.status_code)
            assert body["error"]["code"] == direct["error"]["code"], name
        else:
            assert response.status_code == 200, (name, body)
            assert stable(body) == stable(direct), name


@pytest.mark.anyio
async def test_the_swagger_ui_is_served_from_local_static_files(mcp_http):
    async with mcp_http() as client:
        page = await client.get("/api/v1/docs")
        bundle = await client.get("/static/ninja/swagger-ui-bundle.js")

    assert page.status_code == 200
    assert 'src="/static/ninja/swagger-ui-bundle.js"' in page.text
    assert "cdn" not in page.text.lower()
    assert (bundle.status_code, len(bundle.content) > 100_000) == (200, True)


@pytest.mark.anyio
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"side": "buy", "fail": "yes"}, "fail"), ({"side": "buy", "fail": 1}, "fail"), (["buy"], "arguments")],
)
async def test_rest_refuses_loose_arguments_exactly_as_mcp_does_and_charges_nothing(
    mcp_http, owner, api_key, arguments, field
):
    from asgiref.sync import sync_to_async
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client

    from billing.models import UsageEvent
    from tests.conftest import MCP_URL

    browser = await sync_to_async(signed_in_client)(owner)
    rest = await sync_to_async(browser.post)(
        "/api/v1/tests/probe_metered", arguments, content_type="application/json", headers={"X-CSRFToken": TOKEN}
    )
    mcp_error = None
    if isinstance(arguments, dict):  # MCP's params.arguments is always an object
        transport = streamable_http_client(MCP_URL, http_client=mcp_http(api_key))
        async with McpClient(transport, mode="2026-07-28") as mcp:
            mcp_error = (await mcp.call_tool("probe_metered", arguments)).structured_content["error"]

    assert rest.status_code == 422
    error = rest.json()["error"]
    assert (error["code"], [p["field"] for p in error["problems"]]) == ("invalid_arguments", [field])
    assert mcp_error == (error if isinstance(arguments, dict) else None)
    assert await UsageEvent.objects.acount() == 0


def signed_in_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    client.cookies["csrftoken"] = TOKEN
    return client


def test_a_database_failure_under_a_rest_route_is_a_retryable_503_and_charges_nothing(owner, monkeypatch):
    from django.db import OperationalError

    from billing import services as billing_services
    from billing.models import UsageEvent

    def disk_full(**_):
        raise OperationalError("database or disk is full")

    monkeypatch.setattr(billing_services, "lookup_charge", disk_full)

    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered", {"side": "buy"}, content_type="application/json", headers={"X-CSRFToken": TOKEN}
    )

    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response.json() == {
        "error": {
            "code": "database_unavailable",
            "message": "The database is temporarily unavailable; retry shortly.",
            "retry_after_seconds": 2,
        }
    }
    assert UsageEvent.objects.exists() is False


def test_a_rest_refusal_carries_the_same_details_as_the_tools(owner):
    from billing import selectors, services
    from billing.models import Period, Plan

    Plan.objects.filter(code="free").update(included_lookups=1)
    services.lookup_charge(user=owner, tool="probe_metered", units=1, request_fingerprint="fp", client_request_id=None)

    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered", {"side": "buy"}, content_type="application/json", headers={"X-CSRFToken": TOKEN}
    )

    error = response.json()["error"]
    details = selectors.quota_exhausted_details(Period.objects.get(user=owner))
    assert (response.status_code, "Retry-After" in response) == (402, False)
    assert error == {"code": "quota_exhausted", "message": error["message"], **details}
    assert details["upgrade_url"] == "http://127.0.0.1:8000/account/"


@pytest.mark.parametrize("body", [b"{bad", b"\xff\xfe"])
def test_a_body_that_is_not_json_is_refused_in_the_refusal_shape(owner, body):
    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered", body, content_type="application/json", headers={"X-CSRFToken": TOKEN}
    )

    assert response.status_code == 422
    assert response.json() == {
        "error": {
            "code": "invalid_arguments",
            "message": "Invalid arguments: the body is not JSON",
            "problems": [{"field": "body", "problem": "The body is not JSON"}],
        }
    }
    assert UsageEvent.objects.exists() is False


def test_a_name_holding_a_lone_surrogate_refuses_the_body_as_a_whole_and_charges_nothing(owner):
    # It named no field a refusal could echo: the escape reached the strict parse, which named "\u0000" instead.
    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered",
        b'{"side": "buy", "x\\ud800": 1}',
        content_type="application/json",
        headers={"X-CSRFToken": TOKEN},
    )

    assert (response.status_code, response.json()["error"]["problems"]) == (
        422,
        [{"field": "body", "problem": "The body is not JSON"}],
    )
    assert UsageEvent.objects.exists() is False


def test_a_body_over_the_size_limit_is_a_json_413_naming_the_limit_and_charges_nothing(owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = b'{"side": "buy"' + b" " * 1000 + b"}"  # valid arguments: only their size is refused

    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered", body, content_type="application/json", headers={"X-CSRFToken": TOKEN}
    )

    assert (response.status_code, response["Content-Type"]) == (413, "application/json; charset=utf-8")
    assert response.json() == {
        "error": {
            "code": "payload_too_large",
            "message": "The request body is larger than the limit of 1000 bytes.",
            "limit_bytes": 1000,
        }
    }
    assert UsageEvent.objects.exists() is False


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/"),
        ("GET", "/api/v1/nope"),
        ("POST", "/api/v1/evidence/no_such_tool"),
        ("POST", "/api/v1/tests/probe_metered/"),
        ("DELETE", "/api/v1/billing"),
        ("FOO", "/api/v1/x/y/z"),
    ],
)
def test_a_path_under_the_api_naming_no_route_is_a_json_404_whatever_the_method(owner, method, path):
    response = signed_in_client(owner).generic(method, path, b"{}", content_type="application/json")

    assert (response.status_code, response["Content-Type"]) == (404, "application/json; charset=utf-8")
    message = f"No REST route at {path}. The routes are listed at /api/v1/docs and /api/v1/openapi.json."
    assert response.json() == {"error": {"code": "not_found", "message": message}}
    assert UsageEvent.objects.exists() is False


def test_a_missing_csrf_token_and_a_bearer_credential_are_refused_in_the_refusal_shape(owner):
    no_token = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered", {"side": "buy"}, content_type="application/json"
    )
    bearer = Client().post(
        "/api/v1/tests/probe_metered",
        {"side": "buy"},
        content_type="application/json",
        headers={"Authorization": "Bearer x"},
    )

    assert (no_token.status_code, no_token.json()) == (
        403,
        {"error": {"code": "csrf_failed", "message": "CSRF check Failed"}},
    )
    assert (bearer.status_code, bearer.json()["error"]["code"]) == (401, "not_signed_in")
    assert UsageEvent.objects.exists() is False


def test_a_request_without_a_session_is_refused_in_the_refusal_shape(owner):
    response = Client().post("/api/v1/tests/probe_metered", {"side": "buy"}, content_type="application/json")

    assert (response.status_code, response.json()) == (
        401,
        {"error": {"code": "not_signed_in", "message": "Sign in to use the REST API."}},
    )
    assert UsageEvent.objects.exists() is False


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("GET", "/api/v1/tests/probe_metered", "POST"),
        ("PUT", "/api/v1/tests/probe_metered", "POST"),
        ("OPTIONS", "/api/v1/tests/probe_metered", "POST"),
        ("FOO", "/api/v1/tests/probe_metered", "POST"),
        ("PUT", "/api/v1/evidence/get_publication_maturity", "GET, HEAD"),
        ("DELETE", "/api/v1/evidence/get_publication_maturity", "GET, HEAD"),
        ("BREW", "/api/v1/tests/probe_whoami", "GET, HEAD"),
    ],
)
def test_a_method_the_route_does_not_take_is_a_405_refusal_naming_the_ones_it_does(owner, method, path, allowed):
    for client in (signed_in_client(owner), Client()):
        response = client.generic(
            method, path, b'{"side": "buy"}', content_type="application/json", headers={"X-CSRFToken": TOKEN}
        )

        assert (response.status_code, response["Content-Type"], response["Allow"]) == (
            405,
            "application/json; charset=utf-8",
            allowed,
        )
        assert response.json() == {
            "error": {
                "code": "method_not_allowed",
                "message": f"This route takes {allowed} only, not {method}.",
            }
        }
    assert UsageEvent.objects.exists() is False


def test_a_get_route_refuses_a_query_parameter_it_does_not_take_as_mcp_refuses_an_unknown_argument(owner):
    public = Client().get("/api/v1/evidence/get_publication_maturity?x=1")
    signed_in = signed_in_client(owner).get("/api/v1/tests/probe_whoami?x=1&y=")

    assert (public.status_code, public.json()) == (
        422,
        {
            "error": {
                "code": "invalid_arguments",
                "message": "Invalid arguments: x: Extra inputs are not permitted",
                "problems": [{"field": "x", "problem": "Extra inputs are not permitted"}],
            }
        },
    )
    assert (signed_in.status_code, signed_in.json()["error"]["problems"]) == (
        422,
        [
            {"field": "x", "problem": "Extra inputs are not permitted"},
            {"field": "y", "problem": "Extra inputs are not permitted"},
        ],
    )
    assert UsageEvent.objects.exists() is False


def test_a_head_request_of_a_get_route_is_answered_as_its_get_without_the_body(owner):
    head = signed_in_client(owner).head("/api/v1/tests/probe_whoami")
    get = signed_in_client(owner).get("/api/v1/tests/probe_whoami")
    anonymous = Client().head("/api/v1/tests/probe_whoami")
    documented = Client().get("/api/v1/openapi.json").json()["paths"]["/api/v1/tests/probe_whoami"]

    assert (get.status_code, get.json()["email"]) == (200, "alice@example.com")
    assert (head.status_code, head["Content-Type"], head.content) == (200, get["Content-Type"], b"")
    assert (anonymous.status_code, anonymous.content) == (401, b"")
    assert set(documented) == {"get"}


def test_a_post_route_refuses_a_query_string_it_does_not_take_and_charges_nothing(owner):
    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered?foo=bar&side=sell",
        {"side": "buy"},
        content_type="application/json",
        headers={"X-CSRFToken": TOKEN},
    )

    problem = "A POST takes its arguments in the JSON body, not in the query string"
    assert (response.status_code, response.json()) == (
        422,
        {
            "error": {
                "code": "invalid_arguments",
                "message": f"Invalid arguments: foo: {problem}; side: {problem}",
                "problems": [{"field": "foo", "problem": problem}, {"field": "side", "problem": problem}],
            }
        },
    )
    assert UsageEvent.objects.exists() is False


def test_a_body_giving_a_name_twice_is_refused_naming_it_and_charges_nothing(owner):
    response = signed_in_client(owner).post(
        "/api/v1/tests/probe_metered",
        b'{"side": "buy", "side": "sell"}',
        content_type="application/json",
        headers={"X-CSRFToken": TOKEN},
    )

    problem = "Given more than once (a name may appear once in a JSON object)"
    assert (response.status_code, response.json()) == (
        422,
        {
            "error": {
                "code": "invalid_arguments",
                "message": f"Invalid arguments: side: {problem}",
                "problems": [{"field": "side", "problem": problem}],
            }
        },
    )
    assert UsageEvent.objects.exists() is False


@pytest.mark.django_db
def test_an_empty_body_to_a_route_whose_arguments_are_all_optional_is_the_call_with_none(world):
    path = "/api/v1/evidence/get_data_lineage"

    empty = Client().post(path, b"", content_type="application/json")
    without = Client().generic("POST", path)  # no body and no Content-Type at all
    braces = Client().post(path, b"{}", content_type="application/json")

    assert (empty.status_code, without.status_code, braces.status_code) == (200, 200, 200)
    assert empty.json() == without.json() == braces.json()
    assert braces.json()["artifact_sha256"] == world.sha256


def test_an_empty_body_to_a_route_with_a_required_argument_is_refused_naming_it(db):
    response = Client().post("/api/v1/evidence/get_log_inclusion_proof", b"", content_type="application/json")

    assert (response.status_code, response.json()) == (
        422,
        {
            "error": {
                "code": "invalid_arguments",
                "message": "Invalid arguments: index: Field required",
                "problems": [{"field": "index", "problem": "Field required"}],
            }
        },
    )


def test_a_lone_surrogate_in_the_body_is_refused_at_its_field_beside_the_others(db):
    # Python's parser takes the escape; pydantic's refused the re-encoded text as a whole, naming "arguments".
    response = Client().post(
        "/api/v1/evidence/get_historical_replay",
        b'{"symbol": "AB\\ud800", "limit": "5"}',
        content_type="application/json",
    )

    unstorable = "Value error, text must not contain NUL characters or lone surrogates"
    assert (response.status_code, response.json()) == (
        422,
        {
            "error": {
                "code": "invalid_arguments",
                "message": f"Invalid arguments: limit: Input should be a valid integer; symbol: {unstorable}",
                "problems": [
                    {"field": "limit", "problem": "Input should be a valid integer"},
                    {"field": "symbol", "problem": unstorable},
                ],
            }
        },
    )
    assert UsageEvent.objects.exists() is False


DOCS = ["/api/v1/docs", "/api/v1/openapi.json"]


@pytest.mark.parametrize("path", DOCS)
@pytest.mark.parametrize("method", ["FOO", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"])
def test_the_docs_routes_refuse_a_method_they_do_not_take_as_every_route_does(path, method):
    response = Client(enforce_csrf_checks=True).generic(method, path)

    assert (response.status_code, response["Content-Type"], response["Allow"]) == (
        405,
        "application/json; charset=utf-8",
        "GET, HEAD",
    )
    assert response.json() == {
        "error": {"code": "method_not_allowed", "message": f"This route takes GET, HEAD only, not {method}."}
    }


@pytest.mark.parametrize("path", DOCS)
def test_the_docs_routes_answer_head_as_their_get_without_the_body(path):
    get, head = Client().get(path), Client().head(path)

    assert (get.status_code, bool(get.content)) == (200, True)
    assert (head.status_code, head["Content-Type"], head.content) == (200, get["Content-Type"], b"")


FROZEN = datetime(2026, 8, 3, 14, 0, 10, tzinfo=UTC)


def echo(client: Client, **headers: str):
    return client.post("/api/v1/tests/probe_echo", {"text": "x"}, content_type="application/json", headers=headers)


def test_41st_anonymous_rest_call_in_a_minute_gets_429_with_retry_after(db):
    with time_machine.travel(FROZEN, tick=False):
        statuses = [echo(Client()).status_code for _ in range(40)]
        refused = echo(Client())

    assert statuses == [200] * 40
    assert refused.status_code == 429
    assert refused["Retry-After"] == "50"
    assert refused.json() == {
        "error": {
            "code": "rate_limited",
            "message": "Rate limit of 40 calls per minute exceeded",
            "limit_per_minute": 40,
            "retry_after_seconds": 50,
        }
    }


def test_121st_signed_in_rest_call_in_a_minute_gets_429_and_another_account_is_unaffected(owner, outsider):
    mine, theirs = signed_in_client(owner), signed_in_client(outsider)
    with time_machine.travel(FROZEN, tick=False):
        statuses = [mine.get("/api/v1/tests/probe_whoami").status_code for _ in range(120)]
        refused = mine.get("/api/v1/tests/probe_whoami")
        public = echo(mine, X_CSRFToken=TOKEN)  # a public tool, signed in: the account's budget too
        other = theirs.get("/api/v1/tests/probe_whoami")

    assert statuses == [200] * 120
    assert refused.status_code == 429
    assert refused["Retry-After"] == "50"
    assert refused.json()["error"] == {
        "code": "rate_limited",
        "message": "Rate limit of 120 calls per minute exceeded",
        "limit_per_minute": 120,
        "retry_after_seconds": 50,
    }
    assert public.status_code == 429
    assert other.status_code == 200
    assert other.json()["email"] == "charlie@example.com"


def test_a_signed_in_accounts_rest_calls_leave_the_anonymous_budget_of_its_address_alone(owner):
    mine = signed_in_client(owner)
    with time_machine.travel(FROZEN, tick=False):
        for _ in range(41):
            mine.get("/api/v1/tests/probe_whoami")
        anonymous = echo(Client())

    assert anonymous.status_code == 200


def test_an_answer_for_a_signed_in_account_is_never_cached_and_an_anonymous_public_one_may_be(owner):
    private = signed_in_client(owner).get("/api/v1/billing/get_usage")
    refused = signed_in_client(owner).post(
        "/api/v1/tests/probe_echo", {"text": "fail"}, content_type="application/json", headers={"X-CSRFToken": TOKEN}
    )
    public = echo(Client())

    assert private.status_code == 200
    assert private["Cache-Control"] == "max-age=0, no-cache, no-store, must-revalidate, private"
    assert private["Vary"] == "Cookie"
    assert refused.status_code == 400
    assert refused["Cache-Control"] == "max-age=0, no-cache, no-store, must-revalidate, private"
    assert public.status_code == 200
    assert public.has_header("Cache-Control") is False


def nested_body(levels: int) -> bytes:
    """An arguments object whose `symbol` nests lists until the body is `levels` deep (the object is level 1)."""
    return b'{"symbol": ' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"


@pytest.mark.django_db
def test_a_body_nested_a_thousand_deep_is_refused_in_the_refusal_shape_not_a_500(caplog):
    # It once reached ToolArgs' recursive checks through ninja's parse and overflowed the stack: an HTML 500.
    with caplog.at_level(logging.WARNING):
        response = Client().post(
            "/api/v1/evidence/get_historical_replay", nested_body(1000), content_type="application/json"
        )

    assert (response.status_code, response["Content-Type"]) == (422, "application/json; charset=utf-8")
    assert response.json() == {
        "error": {
            "code": "invalid_arguments",
            "message": f"Invalid arguments: the body is JSON nested deeper than {MAX_JSON_DEPTH} levels",
            "problems": [{"field": "body", "problem": f"The body is JSON nested deeper than {MAX_JSON_DEPTH} levels"}],
        }
    }
    assert [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR] == []


def test_rest_refuses_nesting_past_the_mcp_limit_and_judges_the_arguments_at_it(owner):
    browser = signed_in_client(owner)

    def post(levels: int):
        return browser.post(
            "/api/v1/tests/probe_metered", nested_body(levels), content_type="application/json",
            headers={"X-CSRFToken": TOKEN},
        )  # fmt: skip

    too_deep, at_limit = post(MAX_JSON_DEPTH + 1), post(MAX_JSON_DEPTH)

    assert too_deep.status_code == 422
    assert too_deep.json()["error"]["problems"] == [
        {"field": "body", "problem": f"The body is JSON nested deeper than {MAX_JSON_DEPTH} levels"}
    ]
    assert at_limit.status_code == 422  # parsed: the arguments themselves are wrong (no side, symbol unknown)
    assert sorted(p["field"] for p in at_limit.json()["error"]["problems"]) == ["side", "symbol"]
    assert UsageEvent.objects.exists() is False

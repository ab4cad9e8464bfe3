import pytest
from django.test import Client

from billing.models import Transfer, UsageEvent
from evidence.models import ResearchHypothesis
from evidence.schemas import EvaluateArgs, LineageArgs, SetupArgs
from tests.calls import call_tool

pytestmark = pytest.mark.django_db

BASE = "/api/v1/evidence"
TOKEN = "a" * 32  # a valid unmasked CSRF secret, set as both cookie and header


@pytest.fixture
def browser(owner) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    client.cookies["csrftoken"] = TOKEN
    return client


def post(client: Client, path: str, body: dict, **headers: str):
    return client.post(f"{BASE}{path}", body, content_type="application/json", headers=headers)


def test_openapi_document_lists_every_evidence_route():
    response = Client().get("/api/v1/openapi.json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {
        f"{BASE}/{p}"
        for p in ("evaluate_current_setup", "get_current_confluence_leaders", "search_market_memory",
                  "compare_historical_analogues", "explain_setup_failure", "compare_against_benchmark",
                  "simulate_exit_policy", "get_market_regime", "estimate_execution_conditions", "get_data_lineage",
                  "record_research_hypothesis", "review_hypothesis_outcome")
    } <= set(paths)  # fmt: skip
    assert "SetupArgs" in response.json()["components"]["schemas"]
    statuses = set(paths[f"{BASE}/compare_historical_analogues"]["post"]["responses"])
    assert statuses == {"200", "400", "401", "402", "404", "405", "409", "413", "422", "429", "503"}


def test_signed_in_account_gets_the_same_answer_as_the_mcp_tool_service(fed_world, browser, owner):
    response = post(browser, "/compare_historical_analogues", {"symbol": "ALFA", "side": "buy"}, X_CSRFToken=TOKEN)

    assert response.status_code == 200
    body = response.json()
    direct = call_tool(owner, "compare_historical_analogues", SetupArgs(symbol="ALFA", side="buy"))
    assert body["analogues"] == direct.model_dump(mode="json")["analogues"]
    assert body["provenance"]["artifact_sha256"] == fed_world.sha256
    assert (body["usage"]["lookup_cost"], direct.usage.used_lookups) == (1, 2)


def test_a_write_without_the_csrf_token_is_refused_and_charges_nothing(fed_world, browser):
    response = post(browser, "/compare_historical_analogues", {"symbol": "ALFA", "side": "buy"})

    assert response.status_code == 403
    assert UsageEvent.objects.exists() is False


@pytest.mark.parametrize("path", ["/compare_historical_analogues", "/get_current_confluence_leaders"])
def test_api_keys_are_refused_on_the_rest_api_even_beside_a_session(fed_world, browser, api_key, path):
    body = {"symbol": "ALFA", "side": "buy"} if path == "/compare_historical_analogues" else {"side": "buy"}
    keyed = post(Client(), path, body, Authorization=f"Bearer {api_key}")
    both = post(browser, path, body, Authorization=f"Bearer {api_key}", X_CSRFToken=TOKEN)

    assert (keyed.status_code, both.status_code) == (401, 401)
    assert UsageEvent.objects.exists() is False


def test_lineage_is_public_but_refuses_a_presented_key(fed_world, api_key):
    anonymous = post(Client(), "/get_data_lineage", {})  # a POST: it takes an optional evaluation_id
    keyed = post(Client(), "/get_data_lineage", {}, Authorization=f"Bearer {api_key}")

    assert anonymous.status_code == 200
    assert anonymous.json()["artifact_sha256"] == fed_world.sha256
    assert keyed.status_code == 401


def test_a_signed_in_caller_reads_the_lineage_of_their_own_evaluation_free_and_an_anonymous_one_is_refused(
    fed_world, browser, owner
):
    # given an evaluation of the account's own, and its lineage as the tool answers it
    evaluation_id = call_tool(owner, "evaluate_current_setup", EvaluateArgs(symbol="ALFA", side="both")).evaluation_id
    direct = call_tool(owner, "get_data_lineage", LineageArgs(evaluation_id=evaluation_id)).model_dump(mode="json")
    charged = (UsageEvent.objects.count(), Transfer.objects.count())

    # when it is asked for over REST, signed in and anonymously
    signed_in = post(browser, "/get_data_lineage", {"evaluation_id": evaluation_id}, X_CSRFToken=TOKEN)
    anonymous = post(Client(), "/get_data_lineage", {"evaluation_id": evaluation_id})

    # then the account gets its rows, free as over MCP; the anonymous caller is refused as before
    assert signed_in.status_code == 200, signed_in.content
    assert len(direct["evaluation_rows"]) >= 1
    assert signed_in.json()["evaluation_rows"] == direct["evaluation_rows"]
    assert (UsageEvent.objects.count(), Transfer.objects.count()) == charged
    assert anonymous.status_code == 400
    assert anonymous.json()["error"] == {
        "code": "unknown_evaluation",
        "message": "evaluations are explained to their own account: authenticate",
    }


def test_a_session_without_the_csrf_token_reads_a_public_tool_anonymously(fed_world, browser, owner):
    evaluation_id = call_tool(owner, "evaluate_current_setup", EvaluateArgs(symbol="ALFA", side="both")).evaluation_id

    response = post(browser, "/get_data_lineage", {"evaluation_id": evaluation_id})  # a cross-site form could send it

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unknown_evaluation"


def test_subscriber_reads_need_a_session(fed_world, browser):
    anonymous = post(Client(), "/get_market_regime", {"side": "sell", "horizon_minutes": 30})
    signed_in = post(browser, "/get_market_regime", {"side": "sell", "horizon_minutes": 30}, X_CSRFToken=TOKEN)

    assert anonymous.status_code == 401
    assert signed_in.status_code == 200, signed_in.content
    assert (signed_in.json()["side"], signed_in.json()["horizon_minutes"]) == ("sell", 30)


def test_refusals_carry_the_tools_error_code(fed_world, browser):
    response = post(browser, "/search_market_memory", {"side": "buy", "horizon_minutes": 5, "signals": ["astrology"]},
                    X_CSRFToken=TOKEN)  # fmt: skip

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_the_journal_over_rest_is_scoped_to_the_signed_in_account(fed_world, browser, outsider):
    theirs = [
        ResearchHypothesis.objects.create(user=outsider, number=n, symbol="ALFA", side="buy", horizon_minutes=5,
                                          note="theirs", recorded_at=fed_world.replay)
        for n in (1, 2)
    ]  # fmt: skip
    note = {"symbol": "ALFA", "side": "sell", "horizon_minutes": 5, "note": "fade"}
    mine = post(browser, "/record_research_hypothesis", note, X_CSRFToken=TOKEN)
    review = post(browser, "/review_hypothesis_outcome", {"hypothesis_id": mine.json()["hypothesis_id"]},
                  X_CSRFToken=TOKEN)  # fmt: skip
    foreign = post(browser, "/review_hypothesis_outcome", {"hypothesis_id": 2}, X_CSRFToken=TOKEN)

    assert mine.status_code == 200
    assert (review.status_code, review.json()["outcome_status"]) == (200, "not_mature")
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "not_found")
    assert mine.json()["hypothesis_id"] == 1
    assert [h.reviewed_at for h in theirs] == [None, None]


def test_invalid_arguments_are_a_422_with_one_problem_per_field_and_charge_nothing(fed_world, browser):
    response = post(browser, "/compare_historical_analogues", {"symbol": "ALFA", "side": "up", "extra": 1},
                    X_CSRFToken=TOKEN)  # fmt: skip

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_arguments"
    assert sorted(p["field"] for p in error["problems"]) == ["extra", "side"]
    assert UsageEvent.objects.exists() is False


def test_levels_whose_reward_to_risk_overflows_are_refused_as_an_invalid_setup_and_charge_nothing(fed_world, browser):
    # Finite levels, an infinite ratio: it once reached the receipt's canonical JSON and failed there, an HTML 500.
    from evidence.models import AnswerReceipt

    levels = {"entry_price": 1, "stop_price": 0.999999, "target_price": 1.7e308}
    response = post(browser, "/evaluate_current_setup", {"symbol": "ALFA", "side": "buy", **levels},
                    X_CSRFToken=TOKEN)  # fmt: skip

    assert (response.status_code, response["Content-Type"]) == (400, "application/json; charset=utf-8")
    assert response.json() == {
        "error": {
            "code": "invalid_setup",
            "message": "the price levels give a risk, reward or reward-to-risk too large to state as a finite number",
        }
    }
    assert UsageEvent.objects.exists() is False
    assert AnswerReceipt.objects.exists() is False


@pytest.mark.parametrize("note", ["   ", "\u200b"])
def test_a_note_with_nothing_visible_is_refused_and_nothing_is_recorded(fed_world, browser, note):
    body = {"symbol": "ALFA", "side": "buy", "horizon_minutes": 5, "note": note}
    response = post(browser, "/record_research_hypothesis", body, X_CSRFToken=TOKEN)

    assert response.status_code == 422
    assert response.json()["error"]["problems"] == [{"field": "note", "problem": "Value error, must not be blank"}]
    assert ResearchHypothesis.objects.exists() is False

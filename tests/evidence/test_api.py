import pytest
from django.test import Client

from billing.models import UsageEvent
from evidence.models import ResearchHypothesis
from evidence.research.analysis import historical_analogues
from evidence.schemas import SetupArgs

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
        for p in ("evaluate", "leaders", "search", "analogues", "failure", "benchmark", "exit-policy", "regime",
                  "execution-conditions", "lineage", "journal", "journal/{hypothesis_id}/review")
    } <= set(paths)  # fmt: skip
    assert "SetupArgs" in response.json()["components"]["schemas"]


def test_signed_in_account_gets_the_same_answer_as_the_mcp_tool_service(fed_world, browser, owner):
    response = post(browser, "/analogues", {"symbol": "ALFA", "side": "buy"}, X_CSRFToken=TOKEN)

    assert response.status_code == 200
    body = response.json()
    direct = historical_analogues(user=owner, args=SetupArgs(symbol="ALFA", side="buy"))
    assert body["analogues"] == direct.model_dump(mode="json")["analogues"]
    assert body["provenance"]["artifact_sha256"] == fed_world.sha256
    assert (body["usage"]["lookup_cost"], direct.usage.used_lookups) == (1, 2)


def test_a_write_without_the_csrf_token_is_refused_and_charges_nothing(fed_world, browser):
    response = post(browser, "/analogues", {"symbol": "ALFA", "side": "buy"})

    assert response.status_code == 403
    assert UsageEvent.objects.exists() is False


@pytest.mark.parametrize("path", ["/analogues", "/leaders"])
def test_api_keys_are_refused_on_the_rest_api_even_beside_a_session(fed_world, browser, api_key, path):
    body = {"symbol": "ALFA", "side": "buy"} if path == "/analogues" else {"side": "buy"}
    keyed = post(Client(), path, body, Authorization=f"Bearer {api_key}")
    both = post(browser, path, body, Authorization=f"Bearer {api_key}", X_CSRFToken=TOKEN)

    assert (keyed.status_code, both.status_code) == (401, 401)
    assert UsageEvent.objects.exists() is False


def test_lineage_is_public_but_refuses_a_presented_key(fed_world, api_key):
    anonymous = Client().get(f"{BASE}/lineage")
    keyed = Client().get(f"{BASE}/lineage", headers={"Authorization": f"Bearer {api_key}"})

    assert anonymous.status_code == 200
    assert anonymous.json()["artifact_sha256"] == fed_world.sha256
    assert keyed.status_code == 401


def test_subscriber_reads_need_a_session(fed_world, browser):
    anonymous = post(Client(), "/regime", {"side": "sell", "horizon_minutes": 30})
    signed_in = post(browser, "/regime", {"side": "sell", "horizon_minutes": 30}, X_CSRFToken=TOKEN)

    assert anonymous.status_code == 401
    assert signed_in.status_code == 200, signed_in.content
    assert (signed_in.json()["side"], signed_in.json()["horizon_minutes"]) == ("sell", 30)


def test_refusals_carry_the_tools_error_code(fed_world, browser):
    response = post(browser, "/search", {"side": "buy", "horizon_minutes": 5, "signals": ["astrology"]},
                    X_CSRFToken=TOKEN)  # fmt: skip

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_the_journal_over_rest_is_scoped_to_the_signed_in_account(fed_world, browser, outsider):
    theirs = ResearchHypothesis.objects.create(
        user=outsider, symbol="ALFA", side="buy", horizon_minutes=5, note="theirs", recorded_at=fed_world.replay
    )
    mine = post(browser, "/journal", {"symbol": "ALFA", "side": "sell", "horizon_minutes": 5, "note": "fade"},
                X_CSRFToken=TOKEN)  # fmt: skip
    review = post(browser, f"/journal/{mine.json()['hypothesis_id']}/review", {}, X_CSRFToken=TOKEN)
    foreign = post(browser, f"/journal/{theirs.pk}/review", {}, X_CSRFToken=TOKEN)

    assert mine.status_code == 200
    assert (review.status_code, review.json()["outcome_status"]) == (200, "not_mature")
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (404, "not_found")
    assert ResearchHypothesis.objects.get(pk=theirs.pk).reviewed_at is None

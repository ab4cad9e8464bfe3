from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from oauth2_provider.models import AccessToken, Application

from leroy.clock import now
from tests.accounts.conftest import REDIRECT_URI, consent, exchange, query_of, refresh

pytestmark = pytest.mark.django_db


def post(client: Client, body: object, **extra: str):
    return client.post("/oauth/register/", body, content_type="application/json", **extra)


def test_sdk_shaped_registration_creates_a_public_client(client: Client):
    response = post(
        client,
        {
            "redirect_uris": [REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "scope": "mcp:read",
            "application_type": "native",
            "client_name": "SDK Agent",
        },
    )

    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    application = Application.objects.get()
    assert body == {
        "client_id": application.client_id,
        "client_id_issued_at": int(application.created.timestamp()),
        "client_name": "SDK Agent",
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": "mcp:read mcp:write",
    }
    assert application.client_type == "public"
    assert application.client_secret == ""
    assert application.skip_authorization is False
    assert application.registration_source == "dcr"
    assert AccessToken.objects.count() == 0  # no RFC 7592 registration token


def test_a_narrow_registration_is_answered_with_what_its_tokens_will_carry(
    client: Client, browser: Client, flow, register
):
    narrow = register(grant_types=["authorization_code"], scope="mcp:read")
    started = flow(client_id=narrow["client_id"], scope="mcp:read mcp:write")
    code = query_of(consent(browser, started, grant_write="on")["Location"])["code"]

    tokens = exchange(client, started, code).json()

    assert (narrow["grant_types"], narrow["scope"]) == (["authorization_code", "refresh_token"], "mcp:read mcp:write")
    assert tokens["scope"] == "mcp:read mcp:write"
    assert refresh(client, narrow["client_id"], tokens["refresh_token"]).status_code == 200


@pytest.mark.parametrize("method", ["client_secret_post", "client_secret_basic", "private_key_jwt"])
def test_any_requested_authentication_method_still_registers_a_public_client(client: Client, method):
    response = post(client, {"redirect_uris": [REDIRECT_URI], "token_endpoint_auth_method": method})

    assert response.status_code == 201
    assert response.json()["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in response.json()
    assert Application.objects.get().client_type == "public"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({}, "invalid_redirect_uri"),
        ({"redirect_uris": []}, "invalid_redirect_uri"),
        ({"redirect_uris": [f"https://agent.example/{i}" for i in range(6)]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["http://evil.example/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["javascript:alert(1)"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["com.example.app:/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://agent.example/cb#frag"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://user@agent.example/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://*.evil.example/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://agent.example/*"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://agent.example/a b"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://agent.example/" + "a" * 2000]}, "invalid_redirect_uri"),
        ({"redirect_uris": [7]}, "invalid_redirect_uri"),
        ({"redirect_uris": [REDIRECT_URI], "grant_types": ["client_credentials"]}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT_URI], "grant_types": ["implicit"]}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT_URI], "grant_types": ["refresh_token"]}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT_URI], "response_types": ["token"]}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT_URI], "scope": "mcp:read admin"}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT_URI], "client_name": "n" * 101}, "invalid_client_metadata"),
        ({"redirect_uris": [REDIRECT_URI], "client_name": 5}, "invalid_client_metadata"),
        (["not", "an", "object"], "invalid_client_metadata"),
    ],
)
def test_invalid_metadata_is_refused_and_registers_nothing(client: Client, body, error):
    response = post(client, body)

    assert response.status_code == 400
    assert response.json()["error"] == error
    assert response["Cache-Control"] == "no-store"
    assert Application.objects.count() == 0


@pytest.mark.parametrize("body", ["{", "[" * 100_000 + "]" * 100_000])  # not JSON; nested past the parser's depth
def test_malformed_json_is_refused(client: Client, body):
    response = client.post("/oauth/register/", body, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client_metadata"
    assert Application.objects.count() == 0


@pytest.mark.parametrize(
    "uri", ["http://127.0.0.1:9/cb", "http://[::1]:9/cb", "http://localhost:9/cb", "https://agent.example/cb"]
)
def test_https_and_loopback_http_redirects_are_accepted(client: Client, uri):
    assert post(client, {"redirect_uris": [uri]}).status_code == 201


def test_client_name_is_stripped_of_control_and_bidi_characters(client: Client):
    response = post(client, {"redirect_uris": [REDIRECT_URI], "client_name": " Good\u202e\u0000 \n Agent\u200b "})

    assert response.json()["client_name"] == "Good Agent"
    assert Application.objects.get().name == "Good Agent"


def test_missing_client_name_registers_an_unnamed_client(client: Client):
    response = post(client, {"redirect_uris": [REDIRECT_URI]})

    assert "client_name" not in response.json()
    assert Application.objects.get().name == ""


def test_registration_is_rate_limited_per_address(client: Client, settings):
    settings.LEROY_OAUTH_REGISTRATIONS_PER_MINUTE = 2

    statuses = [post(client, {"redirect_uris": [REDIRECT_URI]}).status_code for _ in range(3)]
    other_address = post(client, {"redirect_uris": [REDIRECT_URI]}, REMOTE_ADDR="198.51.100.9")

    assert statuses == [201, 201, 429]
    assert other_address.status_code == 201
    refused = post(client, {"redirect_uris": [REDIRECT_URI]})
    assert refused.status_code == 429
    assert refused["Cache-Control"] == "no-store"
    assert Application.objects.count() == 3


def test_unused_registrations_are_collected_after_a_day_but_used_ones_stay(client: Client, connect):
    used = connect()["client_id"]
    post(client, {"redirect_uris": [REDIRECT_URI]})
    unused = Application.objects.exclude(client_id=used).latest("created").client_id

    with time_machine.travel(now() + timedelta(hours=25), tick=False):
        post(client, {"redirect_uris": [REDIRECT_URI]})

    remaining = set(Application.objects.values_list("client_id", flat=True))
    assert used in remaining
    assert unused not in remaining
    assert len(remaining) == 2  # the used client and the one just registered

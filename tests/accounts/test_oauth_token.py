import hashlib
from datetime import timedelta

import pytest
import time_machine
from django.core.management import call_command
from django.test import Client
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken

from accounts.models import RedeemedCode
from leroy.clock import now
from tests.accounts.conftest import REDIRECT_URI, RESOURCE, authorization_code, exchange, refresh

pytestmark = pytest.mark.django_db


def checksum(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_code_exchange_returns_one_hour_bearer_and_a_refresh_token_stored_only_as_hashes(client, browser, flow):
    started = flow()

    response = exchange(client, started, authorization_code(browser, started))

    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    assert body["scope"] == "mcp:read"
    access = AccessToken.objects.get(token_checksum=checksum(body["access_token"]))
    assert access.token == ""
    assert access.resource == [RESOURCE]
    refresh_row = RefreshToken.objects.get(token_checksum=checksum(body["refresh_token"]))
    assert refresh_row.token == ""
    assert refresh_row.access_token_id == access.pk


def test_resource_is_inherited_when_the_token_request_omits_it(client, browser, flow):
    started = flow()

    response = exchange(client, started, authorization_code(browser, started), resource=None)

    assert response.status_code == 200
    assert AccessToken.objects.get().resource == [RESOURCE]


@pytest.mark.parametrize("resource", ["https://evil.example/api/mcp", RESOURCE + "/", "http://127.0.0.1:8000"])
def test_foreign_resource_at_the_code_exchange_is_refused(client, browser, flow, resource):
    started = flow()

    response = exchange(client, started, authorization_code(browser, started), resource=resource)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_target"
    assert AccessToken.objects.count() == 0


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"code_verifier": "x" * 64}, "invalid_grant"),
        ({"code_verifier": None}, "invalid_request"),
        ({"redirect_uri": "http://127.0.0.1:53117/other"}, "invalid_request"),
    ],
)
def test_wrong_verifier_or_redirect_uri_is_refused(client, browser, flow, changes, error):
    started = flow()

    response = exchange(client, started, authorization_code(browser, started), **changes)

    assert response.status_code == 400
    assert response.json()["error"] == error
    assert AccessToken.objects.count() == 0


def test_code_redeemed_by_another_client_is_refused(client, browser, flow, register):
    started = flow()
    other = register()["client_id"]

    response = exchange(client, started, authorization_code(browser, started), client_id=other)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    assert AccessToken.objects.count() == 0


def test_grant_stored_without_a_challenge_cannot_be_redeemed_with_a_verifier(client, owner, flow, register):
    started = flow()
    Grant.objects.create(
        application=Application.objects.get(client_id=started.client_id),
        user=owner,
        code=checksum("planted-code"),
        expires=now() + timedelta(seconds=60),
        redirect_uri="http://127.0.0.1:53117/callback",
        scope="mcp:read",
        resource=[RESOURCE],
    )

    response = exchange(client, started, "planted-code")

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"
    assert AccessToken.objects.count() == 0


def test_code_older_than_sixty_seconds_is_refused(client, browser, flow):
    started = flow()
    code = authorization_code(browser, started)

    with time_machine.travel(now() + timedelta(seconds=61), tick=False):
        response = exchange(client, started, code)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


def test_code_replay_is_refused_and_revokes_what_the_first_redemption_issued(client, browser, flow):
    started = flow()
    code = authorization_code(browser, started)
    first = exchange(client, started, code).json()

    replay = exchange(client, started, code)

    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert AccessToken.objects.count() == 0
    assert RefreshToken.objects.get(token_checksum=checksum(first["refresh_token"])).revoked is not None
    assert refresh(client, started.client_id, first["refresh_token"]).status_code == 400


@pytest.mark.parametrize(
    "grant_type",
    [
        "client_credentials",
        "password",
        "implicit",
        "urn:ietf:params:oauth:grant-type:device_code",
        "urn:ietf:params:oauth:grant-type:jwt-bearer",
        "",
        None,
    ],
)
def test_grant_types_other_than_code_and_refresh_are_refused_as_unsupported(client, register, grant_type):
    client_id = register()["client_id"]
    body = {"client_id": client_id, "username": "alice@example.com", "password": "x"}

    response = client.post("/oauth/token/", body if grant_type is None else {**body, "grant_type": grant_type})

    assert response.status_code == 400
    assert response.json() == {"error": "unsupported_grant_type"}
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    assert AccessToken.objects.count() == 0
    assert RefreshToken.objects.count() == 0


def test_a_device_code_token_request_is_refused_as_unsupported_not_looked_up(client, register):
    client_id = register()["client_id"]

    response = client.post(
        "/oauth/token",
        {"grant_type": "urn:ietf:params:oauth:grant-type:device_code", "client_id": client_id, "device_code": "x"},
    )

    assert response.status_code == 400
    assert response.json() == {"error": "unsupported_grant_type"}
    assert AccessToken.objects.count() == 0


def test_refresh_rotates_and_kills_the_previous_pair_at_once(client, connect):
    first = connect()

    response = refresh(client, first["client_id"], first["refresh_token"])

    assert response.status_code == 200
    second = response.json()
    assert second["expires_in"] == 3600
    assert second["refresh_token"] != first["refresh_token"]
    assert not AccessToken.objects.filter(token_checksum=checksum(first["access_token"])).exists()
    assert RefreshToken.objects.get(token_checksum=checksum(first["refresh_token"])).revoked is not None
    assert AccessToken.objects.get(token_checksum=checksum(second["access_token"])).resource == [RESOURCE]


def test_replayed_refresh_token_revokes_the_whole_family(client, connect):
    first = connect()
    second = refresh(client, first["client_id"], first["refresh_token"]).json()
    third = refresh(client, first["client_id"], second["refresh_token"]).json()

    replay = refresh(client, first["client_id"], first["refresh_token"])

    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert AccessToken.objects.count() == 0
    assert RefreshToken.objects.filter(revoked__isnull=True).count() == 0
    assert refresh(client, first["client_id"], third["refresh_token"]).status_code == 400


def test_refresh_by_another_client_is_refused(client, connect, register):
    first = connect()

    response = refresh(client, register()["client_id"], first["refresh_token"])

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


@pytest.mark.parametrize("resource", ["https://evil.example/api/mcp", RESOURCE + "/"])
def test_refresh_with_a_foreign_resource_is_refused_and_issues_nothing(client, connect, resource):
    first = connect()

    response = refresh(client, first["client_id"], first["refresh_token"], resource=resource)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_target"
    assert AccessToken.objects.count() == 1
    assert RefreshToken.objects.get().revoked is None


def test_refresh_token_dies_thirty_days_after_its_own_issue(client, connect):
    first = connect()

    with time_machine.travel(now() + timedelta(days=30, seconds=1), tick=False):
        late = refresh(client, first["client_id"], first["refresh_token"])
    with time_machine.travel(now() + timedelta(days=29, hours=23), tick=False):
        in_time = refresh(client, first["client_id"], first["refresh_token"])

    assert late.status_code == 400
    assert late.json()["error"] == "invalid_grant"
    assert in_time.status_code == 200


def test_cleartokens_keeps_revoked_refresh_tokens_so_a_later_replay_is_still_detected(client, connect):
    first = connect()
    second = refresh(client, first["client_id"], first["refresh_token"]).json()

    with time_machine.travel(now() + timedelta(days=2), tick=False):
        call_command("cleartokens")
        replay = refresh(client, first["client_id"], first["refresh_token"])

    assert replay.status_code == 400
    assert refresh(client, first["client_id"], second["refresh_token"]).status_code == 400


def test_revocation_endpoint_kills_the_refresh_and_access_pair(client, connect):
    first = connect()

    response = client.post(
        "/oauth/revoke/",
        {"token": first["refresh_token"], "token_type_hint": "refresh_token", "client_id": first["client_id"]},
    )

    assert response.status_code == 200
    assert AccessToken.objects.count() == 0
    assert refresh(client, first["client_id"], first["refresh_token"]).status_code == 400


def test_redeemed_code_records_are_kept_briefly(client, browser, flow):
    started = flow()
    exchange(client, started, authorization_code(browser, started))

    record = RedeemedCode.objects.get()

    assert record.token_family == RefreshToken.objects.get().token_family
    assert timedelta(minutes=59) < record.expires - now() <= timedelta(hours=1)


def test_token_endpoint_is_csrf_exempt_and_never_redirects(client: Client):
    response = Client(enforce_csrf_checks=True).post("/oauth/token/", {"grant_type": "refresh_token"})

    assert response.status_code in {400, 401}
    assert "Location" not in response


def test_authorization_codes_are_stored_only_as_hashes(browser, flow):
    code = authorization_code(browser, flow())

    assert not Grant.objects.filter(code=code).exists()
    assert Grant.objects.get().code == checksum(code)


def test_token_endpoint_without_the_trailing_slash_is_served_not_redirected(client, browser, flow):
    started = flow()
    code = authorization_code(browser, started)
    body = {
        "grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI,
        "client_id": started.client_id, "code_verifier": started.verifier, "resource": RESOURCE,
    }  # fmt: skip

    response = client.post("/oauth/token", body)

    assert response.status_code == 200
    assert response.json()["token_type"] == "Bearer"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/oauth/token/", "POST, OPTIONS"),
        ("/oauth/token", "POST, OPTIONS"),
        ("/oauth/revoke/", "POST, OPTIONS"),
        ("/oauth/register/", "POST"),
    ],
)
@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_a_method_an_oauth_endpoint_does_not_take_is_a_json_405_naming_the_ones_it_does(
    client: Client, path, allowed, method
):
    response = getattr(client, method)(path)

    assert (response.status_code, response["Allow"]) == (405, allowed)
    assert response["Content-Type"] == "application/json"
    assert response["Cache-Control"] == "no-store"
    assert response.json() == {
        "error": "invalid_request",
        "error_description": f"{path} takes {allowed}, not {method.upper()}.",
    }
    assert Application.objects.exists() is False


@pytest.mark.parametrize(
    "path", ["/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource/api/mcp"]
)
@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_a_method_a_metadata_document_does_not_take_is_a_json_405(client: Client, path, method):
    response = getattr(client, method)(path)

    assert (response.status_code, response["Allow"]) == (405, "GET, HEAD, OPTIONS")
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "error": "invalid_request",
        "error_description": f"{path} takes GET, HEAD, OPTIONS, not {method.upper()}.",
    }

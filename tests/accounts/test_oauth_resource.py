"""OAuth access tokens at /api/mcp (the resource server) and nowhere else."""

import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from asgiref.sync import sync_to_async
from django.test import Client
from oauth2_provider.models import AccessToken, Application, set_token_value

from accounts import services
from accounts.models import User
from leroy.clock import now
from tests.accounts.conftest import RESOURCE
from tests.mcp.test_transport import modern_call, modern_headers

pytestmark = [pytest.mark.anyio, pytest.mark.django_db(transaction=True)]

METADATA = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/api/mcp"


def issue(
    user: User | None,
    *,
    scope: str = "mcp:read",
    resource: Any = None,
    lifetime: int = 3600,
    expires: datetime | None = None,
) -> str:
    application, _ = Application.objects.get_or_create(
        name="Agent",
        defaults={"client_type": "public", "authorization_grant_type": "authorization-code", "client_secret": ""},
    )
    raw = secrets.token_urlsafe(22)
    token = AccessToken(
        user=user,
        application=application,
        scope=scope,
        expires=expires or now() + timedelta(seconds=lifetime),
        resource=[RESOURCE] if resource is None else resource,
    )
    set_token_value(token, raw)
    token.save()
    return raw


async def call(mcp_http, token: str | None, name: str = "probe_whoami", **http_kwargs: Any):
    async with mcp_http(token) as http:
        return await http.post(
            "/api/mcp", json=modern_call(name, {}), headers=modern_headers("tools/call", name), **http_kwargs
        )


async def test_oauth_token_reaches_a_subscriber_tool_as_its_client_for_its_user(mcp_http, owner):
    token = await sync_to_async(issue)(owner)

    response = await call(mcp_http, token)

    assert response.status_code == 200
    application = await Application.objects.aget(name="Agent")
    result = response.json()["result"]
    assert result["structuredContent"] == {
        "email": "alice@example.com",
        "client_id": f"oauth:{application.client_id}",
        "scopes": ["mcp:read"],
    }


@pytest.mark.parametrize(
    "resource",
    [["https://other.example/api/mcp"], [], ["http://127.0.0.1:8000"], [RESOURCE + "/"], [RESOURCE, RESOURCE]],
)
async def test_token_for_another_or_no_resource_is_refused_with_the_challenge(mcp_http, owner, resource):
    token = await sync_to_async(issue)(owner, resource=resource)

    response = await call(mcp_http, token, "probe_echo")

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        'Bearer realm="leroy", error="invalid_token", '
        'error_description="The bearer credential is unknown, revoked or expired", '
        f'resource_metadata="{METADATA}", scope="mcp:read"'
    )


async def test_token_without_a_user_is_refused(mcp_http):
    token = await sync_to_async(issue)(None)

    assert (await call(mcp_http, token, "probe_echo")).status_code == 401


async def test_token_without_mcp_read_is_refused(mcp_http, owner):
    token = await sync_to_async(issue)(owner, scope="mcp:write")

    assert (await call(mcp_http, token, "probe_echo")).status_code == 401


async def test_token_of_a_deactivated_user_is_refused(mcp_http, owner):
    token = await sync_to_async(issue)(owner)
    await User.objects.filter(pk=owner.pk).aupdate(is_active=False)

    assert (await call(mcp_http, token)).status_code == 401


async def test_token_expires_after_one_hour(mcp_http, owner):
    token = await sync_to_async(issue)(owner)

    with time_machine.travel(now() + timedelta(minutes=59), tick=False):
        assert (await call(mcp_http, token)).status_code == 200
    with time_machine.travel(now() + timedelta(hours=1), tick=False):
        response = await call(mcp_http, token)

    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_a_replayed_clock_does_not_stretch_a_tokens_hour(mcp_http, owner, settings):
    stamped = datetime.now(UTC)  # django-oauth-toolkit stamps a token's expiry with the real clock
    token = await sync_to_async(issue)(owner, expires=stamped + timedelta(hours=1))
    settings.LEROY_CLOCK = "replay:2026-05-19T14:30:00Z"  # the demo's replay, months behind

    with time_machine.travel(stamped + timedelta(minutes=59), tick=False):
        assert (await call(mcp_http, token)).status_code == 200
    with time_machine.travel(stamped + timedelta(hours=1), tick=False):
        response = await call(mcp_http, token)

    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


@pytest.mark.parametrize("raw", ["garbage", "x" * 300, secrets.token_urlsafe(22)])
async def test_unknown_bearer_never_downgrades_to_anonymous(mcp_http, raw):
    response = await call(mcp_http, raw, "probe_echo")

    assert response.status_code == 401


async def test_token_in_the_query_string_is_not_a_credential(mcp_http, owner):
    token = await sync_to_async(issue)(owner)

    response = await call(mcp_http, None, params={"access_token": token})

    assert response.status_code == 401
    assert response.json()["result"]["structuredContent"]["error"]["code"] == "subscription_required"


async def test_anonymous_subscriber_call_challenge_points_at_the_resource_metadata(mcp_http):
    response = await call(mcp_http, None)

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == (
        'Bearer realm="leroy", error_description="probe_whoami requires a Leroy API key or OAuth access token", '
        f'resource_metadata="{METADATA}", scope="mcp:read"'
    )


async def test_read_only_token_on_a_write_tool_gets_403_insufficient_scope_for_step_up(mcp_http, owner):
    token = await sync_to_async(issue)(owner)

    response = await call(mcp_http, token, "probe_write")

    assert response.status_code == 403
    challenge = response.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge
    assert f'resource_metadata="{METADATA}"' in challenge
    assert challenge.endswith('scope="mcp:read mcp:write"')


async def test_write_token_may_call_a_write_tool(mcp_http, owner):
    token = await sync_to_async(issue)(owner, scope="mcp:read mcp:write")

    response = await call(mcp_http, token, "probe_write")

    assert response.status_code == 200
    assert response.json()["result"]["structuredContent"]["scopes"] == ["mcp:read", "mcp:write"]


async def test_rate_limit_counts_per_oauth_client_and_user(mcp_http, owner, outsider, settings):
    settings.LEROY_RATE_LIMIT_PRINCIPAL_PER_MINUTE = 1
    alice = await sync_to_async(issue)(owner)
    charlie = await sync_to_async(issue)(outsider)

    assert (await call(mcp_http, alice)).status_code == 200
    assert (await call(mcp_http, alice)).status_code == 429
    assert (await call(mcp_http, charlie)).status_code == 200


async def test_use_is_recorded_at_most_once_a_minute(mcp_http, owner):
    token = await sync_to_async(issue)(owner)
    await AccessToken.objects.aupdate(updated=now() - timedelta(minutes=5))

    await call(mcp_http, token)

    assert now() - (await AccessToken.objects.aget()).updated < timedelta(seconds=5)


@pytest.mark.parametrize("path", ["/account/", "/admin/", "/account/keys/", "/account/mcp/activate/"])
@pytest.mark.parametrize("kind", ["oauth", "api_key"])
def test_bearer_credentials_are_ignored_on_non_mcp_routes(owner, path, kind):
    owner.is_staff = owner.is_superuser = True
    owner.save()
    token = (
        issue(owner, scope="mcp:read mcp:write")
        if kind == "oauth"
        else services.api_key_create(user=owner, name="k", write=True).plaintext
    )
    browser = Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    response = browser.get(path) if path in {"/account/", "/admin/"} else browser.post(path, {"name": "x"})

    assert response.status_code in {302, 403}
    if response.status_code == 302:
        assert "/login/" in response["Location"]
    assert owner.api_keys.count() == (0 if kind == "oauth" else 1)

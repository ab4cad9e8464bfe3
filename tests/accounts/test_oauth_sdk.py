"""End to end with the `mcp` SDK's own OAuth client against a live Leroy (uvicorn in a thread of this process).

The server shares this test's database (transactional test on PostgreSQL), so the session created here signs
the "browser" in, and the consent page is driven headlessly over HTTP like a real browser would.
"""

import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
import pytest
from django.test import Client
from mcp import Client as McpClient
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from oauth2_provider.models import AccessToken, Application, RefreshToken

from accounts.models import User
from leroy.settings import oauth2_provider_settings
from tests.accounts.conftest import hidden_inputs
from tests.live import live_server

pytestmark = pytest.mark.django_db(transaction=True)

MODERN = "2026-07-28"


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class ConsentWithheld(Exception):
    pass


@pytest.fixture
def live_origin(transactional_db: None, settings) -> Iterator[str]:
    """Leroy's ASGI app under uvicorn on a free loopback port, with the public origin pointing at it."""
    from leroy.asgi import LeroyASGI

    # The public origin is set once the port is known: the app reads it at each request.
    with live_server(LeroyASGI(), start_seconds=10) as port:
        origin = f"http://127.0.0.1:{port}"
        settings.LEROY_PUBLIC_ORIGIN = origin
        settings.OAUTH2_PROVIDER = oauth2_provider_settings(origin)
        yield origin


class Agent:
    """An MCP client using the SDK's OAuth provider; its "user" consents in a signed-in browser session."""

    def __init__(self, origin: str, owner: User, auth_method: str | None = None) -> None:
        signed_in = Client()
        signed_in.force_login(owner)
        self.origin = origin
        self.browser = httpx2.Client(base_url=origin, cookies={"sessionid": signed_in.cookies["sessionid"].value})
        self.consents = 0
        self.consent_allowed = True
        self.location = ""
        self.provider = OAuthClientProvider(
            server_url=origin + "/api/mcp",
            storage=MemoryStorage(),
            client_metadata=OAuthClientMetadata(
                client_name="SDK Test Agent",
                redirect_uris=["http://127.0.0.1:1/callback"],
                token_endpoint_auth_method=auth_method,
            ),
            redirect_handler=self.redirect_handler,
            callback_handler=self.callback_handler,
        )

    async def redirect_handler(self, authorization_url: str) -> None:
        if not self.consent_allowed:
            raise ConsentWithheld(authorization_url)
        await anyio.to_thread.run_sync(self.press_authorize, authorization_url)

    def press_authorize(self, authorization_url: str) -> None:
        page = self.browser.get(authorization_url)
        assert page.status_code == 200, page.text
        assert "“SDK Test Agent”" in page.text
        form = hidden_inputs(page.text) | {"allow": "Authorize"}
        if 'name="grant_write"' in page.text:
            form["grant_write"] = "on"  # the user ticks mcp:write when the client asks for it (never pre-ticked)
        self.location = self.browser.post(authorization_url, data=form).headers["location"]
        self.consents += 1

    async def callback_handler(self) -> AuthorizationCodeResult:
        params = dict(parse_qsl(urlsplit(self.location).query))
        return AuthorizationCodeResult(code=params["code"], state=params["state"], iss=params["iss"])

    @property
    def tokens(self) -> OAuthToken:
        assert self.provider.context.current_tokens is not None
        return self.provider.context.current_tokens

    def expire_locally(self) -> None:
        self.provider.context.token_expiry_time = time.time() - 1  # the SDK refreshes only on its own clock

    def whoami(self, tool: str = "probe_whoami") -> dict[str, object]:
        async def call() -> dict[str, object]:
            async with (
                httpx2.AsyncClient(auth=self.provider) as http,
                McpClient(streamable_http_client(self.origin + "/api/mcp", http_client=http), mode=MODERN) as mcp,
            ):
                result = await mcp.call_tool(tool, {})
            assert result.is_error is False, result
            return result.structured_content or {}

        return anyio.run(call)


@pytest.mark.parametrize("auth_method", [None, "client_secret_post"])
def test_sdk_connects_by_oauth_refreshes_and_is_cut_off_by_disconnect(live_origin: str, owner: User, auth_method):
    agent = Agent(live_origin, owner, auth_method)

    first = agent.whoami()  # 401 → discovery → registration → consent → code exchange → retried call
    first_tokens = agent.tokens
    agent.expire_locally()
    second = agent.whoami()

    assert first["email"] == second["email"] == "alice@example.com"
    assert first["scopes"] == ["mcp:read"]
    assert agent.consents == 1
    assert agent.tokens.refresh_token != first_tokens.refresh_token
    application = Application.objects.get()
    assert first["client_id"] == f"oauth:{application.client_id}"
    assert application.name == "SDK Test Agent"
    assert application.client_type == "public"
    assert RefreshToken.objects.filter(revoked__isnull=False).count() == 1  # the first, rotated away
    assert AccessToken.objects.count() == 1

    assert "SDK Test Agent" in agent.browser.get("/account/clients/").text
    disconnected = agent.browser.post(
        f"/account/clients/{application.client_id}/disconnect/",
        data={"csrfmiddlewaretoken": agent.browser.cookies["csrftoken"]},
    )
    assert disconnected.status_code == 302

    refused = httpx2.post(
        live_origin + "/api/mcp",
        headers={
            "Authorization": f"Bearer {agent.tokens.access_token}",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    )
    assert refused.status_code == 401
    assert (
        f'resource_metadata="{live_origin}/.well-known/oauth-protected-resource/api/mcp"'
        in (refused.headers["www-authenticate"])
    )
    # The SDK's stored tokens are dead: its next call is refused and it must ask the user to consent again.
    agent.consent_allowed = False
    with pytest.RaisesGroup(ConsentWithheld):
        agent.whoami()
    agent.browser.close()


def test_replayed_refresh_token_kills_the_sdk_session_until_the_user_consents_again(live_origin: str, owner: User):
    agent = Agent(live_origin, owner)
    agent.whoami()
    stolen = agent.tokens.refresh_token
    agent.expire_locally()
    agent.whoami()

    replay = httpx2.post(
        live_origin + "/oauth/token/",
        data={
            "grant_type": "refresh_token",
            "refresh_token": stolen,
            "client_id": agent.provider.context.client_info.client_id,
        },
    )

    assert replay.status_code == 400
    assert replay.json() == {"error": "invalid_grant"}
    assert AccessToken.objects.count() == 0
    assert agent.whoami()["email"] == "alice@example.com"  # 401 → failed refresh → full flow → consent
    assert agent.consents == 2
    assert Application.objects.count() == 1  # the SDK re-used its registration
    agent.browser.close()


def test_sdk_steps_up_to_mcp_write_after_403_insufficient_scope(live_origin: str, owner: User):
    agent = Agent(live_origin, owner)
    assert agent.whoami()["scopes"] == ["mcp:read"]

    stepped_up = agent.whoami("probe_write")  # 403 insufficient_scope → consent for read + write → retried call

    assert stepped_up["scopes"] == ["mcp:read", "mcp:write"]
    assert agent.consents == 2
    assert AccessToken.objects.latest("created").scope == "mcp:read mcp:write"
    agent.browser.close()

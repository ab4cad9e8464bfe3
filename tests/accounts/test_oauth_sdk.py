"""End to end with the `mcp` SDK's own OAuth client against a live Leroy (uvicorn in a thread of this process).

The server shares this test's database (transactional test on PostgreSQL), so the session created here signs
the "browser" in, and the consent page is driven headlessly over HTTP like a real browser would.
"""

import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
import pytest
import uvicorn
from django.test import Client
from mcp import Client as McpClient
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from oauth2_provider.models import AccessToken, Application, RefreshToken

from accounts.models import User
from leroy.settings import oauth2_provider_settings
from tests.accounts.conftest import hidden_inputs

pytestmark = pytest.mark.django_db(transaction=True)


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
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings.LEROY_PUBLIC_ORIGIN = origin
    settings.OAUTH2_PROVIDER = oauth2_provider_settings(origin)
    from leroy.asgi import LeroyASGI

    server = uvicorn.Server(uvicorn.Config(LeroyASGI(), lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield origin
    server.should_exit = True
    thread.join(timeout=10)
    sock.close()


@pytest.mark.parametrize("auth_method", [None, "client_secret_post"])
def test_sdk_connects_by_oauth_refreshes_and_is_cut_off_by_disconnect(live_origin: str, owner: User, auth_method):
    signed_in = Client()
    signed_in.force_login(owner)
    browser = httpx2.Client(base_url=live_origin, cookies={"sessionid": signed_in.cookies["sessionid"].value})
    seen: dict[str, str] = {}
    consent_allowed = True

    async def redirect_handler(authorization_url: str) -> None:
        if not consent_allowed:
            raise ConsentWithheld(authorization_url)

        def press_authorize() -> None:
            page = browser.get(authorization_url)
            assert page.status_code == 200, page.text
            assert "“SDK Test Agent”" in page.text
            form = hidden_inputs(page.text) | {"allow": "Authorize"}
            seen["location"] = browser.post(authorization_url, data=form).headers["location"]

        await anyio.to_thread.run_sync(press_authorize)

    async def callback_handler() -> AuthorizationCodeResult:
        params = dict(parse_qsl(urlsplit(seen["location"]).query))
        return AuthorizationCodeResult(code=params["code"], state=params["state"], iss=params["iss"])

    provider = OAuthClientProvider(
        server_url=live_origin + "/api/mcp",
        storage=MemoryStorage(),
        client_metadata=OAuthClientMetadata(
            client_name="SDK Test Agent",
            redirect_uris=["http://127.0.0.1:1/callback"],
            token_endpoint_auth_method=auth_method,
        ),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )

    async def session() -> tuple[str, str]:
        async with (
            httpx2.AsyncClient(auth=provider) as http,
            McpClient(streamable_http_client(live_origin + "/api/mcp", http_client=http), mode="2026-07-28") as mcp,
        ):
            first = await mcp.call_tool("probe_whoami", {})  # 401 → discovery → registration → consent → code
            first_tokens = provider.context.current_tokens
            provider.context.token_expiry_time = time.time() - 1  # the SDK refreshes only on its own clock
            second = await mcp.call_tool("probe_whoami", {})
        assert first.is_error is False and second.is_error is False
        assert first.structured_content["email"] == second.structured_content["email"] == "alice@example.com"
        assert first.structured_content["scopes"] == ["mcp:read"]
        assert first_tokens is not None and provider.context.current_tokens is not None
        assert provider.context.current_tokens.refresh_token != first_tokens.refresh_token
        return first_tokens.refresh_token or "", provider.context.current_tokens.access_token

    first_refresh, access_token = anyio.run(session)

    application = Application.objects.get()
    assert application.name == "SDK Test Agent"
    assert application.client_type == "public"
    assert RefreshToken.objects.filter(revoked__isnull=False).count() == 1  # the first, rotated away
    assert AccessToken.objects.count() == 1

    account = browser.get("/account/")
    assert "SDK Test Agent" in account.text
    disconnected = browser.post(
        f"/account/clients/{application.client_id}/disconnect/",
        data={"csrfmiddlewaretoken": browser.cookies["csrftoken"]},
    )
    assert disconnected.status_code == 302
    consent_allowed = False

    refused = httpx2.post(
        live_origin + "/api/mcp",
        headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json, text/event-stream"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    )
    assert refused.status_code == 401
    assert (
        f'resource_metadata="{live_origin}/.well-known/oauth-protected-resource/api/mcp"'
        in (refused.headers["www-authenticate"])
    )
    assert httpx2.post(
        live_origin + "/oauth/token/",
        data={"grant_type": "refresh_token", "refresh_token": first_refresh, "client_id": application.client_id},
    ).json() == {"error": "invalid_grant"}

    async def after_disconnect() -> None:
        async with (
            httpx2.AsyncClient(auth=provider) as http,
            McpClient(streamable_http_client(live_origin + "/api/mcp", http_client=http), mode="2026-07-28") as mcp,
        ):
            await mcp.call_tool("probe_whoami", {})

    # The SDK's stored token is dead: its next call is refused and it must ask the user to consent again.
    with pytest.RaisesGroup(ConsentWithheld):
        anyio.run(after_disconnect)
    browser.close()

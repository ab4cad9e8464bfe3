"""The official MCP SDK client connects by OAuth; its browser step is Chromium, where the user clicks Authorize."""

import queue
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qsl, urlsplit

import anyio
import httpx2
from mcp import Client as McpClient
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata
from oauth2_provider.models import AccessToken, Application
from playwright.sync_api import Page, Route

from accounts.models import User
from tests.accounts.test_oauth_sdk import MemoryStorage
from tests.e2e.conftest import log_in

CALLBACK = "http://127.0.0.1:1/callback"
LISTENER = "http://127.0.0.1:1/**"  # the client's own loopback listener, played by the test


class ChromiumConsent:
    """The SDK runs on a worker thread; its redirect handler hands the authorization URL to the test thread,
    which owns the Playwright page, and waits for the address the browser was sent back to."""

    def __init__(self, origin: str, page: Page) -> None:
        self.origin, self.page = origin, page
        self.urls: queue.Queue[str] = queue.Queue()
        self.locations: queue.Queue[str] = queue.Queue()
        self.location = ""
        self.provider = OAuthClientProvider(
            server_url=origin + "/api/mcp",
            storage=MemoryStorage(),
            client_metadata=OAuthClientMetadata(client_name="Chromium Test Agent", redirect_uris=[CALLBACK]),
            redirect_handler=self.redirect_handler,
            callback_handler=self.callback_handler,
        )

    async def redirect_handler(self, authorization_url: str) -> None:
        self.urls.put(authorization_url)
        self.location = await anyio.to_thread.run_sync(self.locations.get, abandon_on_cancel=True)

    async def callback_handler(self) -> AuthorizationCodeResult:
        params = dict(parse_qsl(urlsplit(self.location).query))
        assert "code" in params, self.location
        return AuthorizationCodeResult(code=params["code"], state=params["state"], iss=params["iss"])

    async def _whoami(self) -> dict[str, object]:
        async with (
            httpx2.AsyncClient(auth=self.provider) as http,
            McpClient(streamable_http_client(self.origin + "/api/mcp", http_client=http)) as mcp,
        ):
            result = await mcp.call_tool("probe_whoami", {})
        assert result.is_error is False, result
        return result.structured_content or {}

    def whoami(self) -> dict[str, object]:
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(anyio.run, self._whoami)
            deadline = time.monotonic() + 60
            while not call.done():
                assert time.monotonic() < deadline, "the SDK call did not finish"
                try:
                    url = self.urls.get(timeout=0.05)
                except queue.Empty:
                    continue
                try:
                    self.locations.put(self.authorize(url))
                except BaseException:
                    self.locations.put(CALLBACK + "?error=browser_step_failed")  # lets the SDK thread end
                    raise
            return call.result()

    def authorize(self, url: str) -> str:
        back: list[str] = []

        def callback(route: Route) -> None:
            if route.request.url.startswith(CALLBACK):
                back.append(route.request.url)
            route.fulfill(status=200, content_type="text/plain", body="Authorized; you may close this tab.")

        self.page.route(LISTENER, callback)
        self.page.goto(url)
        assert self.page.locator("h1").inner_text() == "Connect “Chromium Test Agent” to your Leroy account?"
        self.page.get_by_role("button", name="Authorize").click()
        self.page.wait_for_url(CALLBACK + "**")
        return back[0]


def test_sdk_client_connects_through_chromium_consent_and_disconnect_cuts_it_off(
    person: Page, origin: str, alice: User, shoot
):
    log_in(person, origin, "alice@example.com")
    agent = ChromiumConsent(origin, person)

    answer = agent.whoami()  # 401 → discovery → registration → consent in Chromium → code exchange → call

    assert answer["email"] == "alice@example.com"
    assert answer["scopes"] == ["mcp:read"]
    application = Application.objects.get()
    assert AccessToken.objects.filter(user=alice, application=application).count() == 1
    person.goto(origin + "/account/clients/")
    row = person.locator("#connected-clients tbody tr", has_text="Chromium Test Agent")
    assert row.count() == 1
    assert "unverified" in row.inner_text()
    assert "127.0.0.1" in row.inner_text()
    shoot("connected-clients")

    person.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Disconnect").click()
    person.wait_for_url(origin + "/account/clients/")
    assert "Disconnected Chromium Test Agent." in person.locator(".messages").inner_text()
    assert person.locator("#connected-clients tbody tr", has_text="Chromium Test Agent").count() == 0
    assert agent.provider.context.current_tokens is not None
    refused = httpx2.post(
        origin + "/api/mcp",
        headers={
            "Authorization": f"Bearer {agent.provider.context.current_tokens.access_token}",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
    )
    assert refused.status_code == 401
    assert AccessToken.objects.count() == 0

"""OAuth helpers: a registered public client, PKCE pairs and the browser side of the consent page."""

import base64
import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from html import unescape
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from django.test import Client

from accounts.models import User

ORIGIN = "http://127.0.0.1:8000"
RESOURCE = ORIGIN + "/api/mcp"
REDIRECT_URI = "http://127.0.0.1:53117/callback"


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def hidden_inputs(html: str) -> dict[str, str]:
    fields = {}
    for tag in re.findall(r"<input[^>]*>", html):
        if 'type="hidden"' in tag:
            name = re.search(r'name="([^"]*)"', tag)
            value = re.search(r'value="([^"]*)"', tag)
            if name:
                fields[unescape(name.group(1))] = unescape(value.group(1)) if value else ""
    return fields


def query_of(location: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(location).query))


@dataclass
class Flow:
    """One client's authorization attempt: the parameters it sends and the PKCE verifier it keeps."""

    client_id: str
    verifier: str
    params: dict[str, Any]

    @property
    def url(self) -> str:
        return "/oauth/authorize/?" + urlencode(self.params, doseq=True)


@pytest.fixture
def register(client: Client) -> Callable[..., dict[str, Any]]:
    def make(**metadata: Any) -> dict[str, Any]:
        body = {"redirect_uris": [REDIRECT_URI], "client_name": "Research Agent", **metadata}
        response = client.post("/oauth/register/", body, content_type="application/json")
        assert response.status_code == 201, response.content
        return response.json()

    return make


@pytest.fixture
def flow(register: Callable[..., dict[str, Any]]) -> Callable[..., Flow]:
    def make(client_id: str | None = None, scope: str = "mcp:read", **overrides: Any) -> Flow:
        client_id = client_id or register()["client_id"]
        verifier, challenge = pkce_pair()
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT_URI,
            "state": "state-" + secrets.token_hex(4),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": RESOURCE,
            "scope": scope,
            **overrides,
        }
        return Flow(client_id=client_id, verifier=verifier, params={k: v for k, v in params.items() if v is not None})

    return make


@pytest.fixture
def browser(owner: User) -> Client:
    """The owner's signed-in browser, enforcing CSRF like a real one."""
    session = Client(enforce_csrf_checks=True)
    session.force_login(owner)
    return session


def consent(browser: Client, flow: Flow, **changes: str) -> Any:
    """Open the consent page and press Authorize (or Cancel with allow=None); returns the POST response."""
    page = browser.get(flow.url)
    assert page.status_code == 200, page.content
    form = hidden_inputs(page.content.decode()) | {"allow": "Authorize"} | changes
    return browser.post(flow.url, {k: v for k, v in form.items() if v is not None})


def authorization_code(browser: Client, flow: Flow) -> str:
    response = consent(browser, flow)
    assert response.status_code == 302, response.content
    return query_of(response["Location"])["code"]


def exchange(client: Client, flow: Flow, code: str, **changes: str | None) -> Any:
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT_URI,
        "client_id": flow.client_id,
        "code_verifier": flow.verifier,
        "resource": RESOURCE,
        **changes,
    }
    return client.post("/oauth/token/", {k: v for k, v in body.items() if v is not None})


def refresh(client: Client, client_id: str, refresh_token: str, **changes: str | None) -> Any:
    body = {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": client_id,
        "resource": RESOURCE,
        **changes,
    }
    return client.post("/oauth/token/", {k: v for k, v in body.items() if v is not None})


@pytest.fixture
def connect(browser: Client, client: Client, flow: Callable[..., Flow]) -> Callable[..., dict[str, Any]]:
    """Run the whole browser flow for the owner; returns the token response plus the client_id."""

    def make(**flow_args: Any) -> dict[str, Any]:
        started = flow(**flow_args)
        response = exchange(client, started, authorization_code(browser, started))
        assert response.status_code == 200, response.content
        return response.json() | {"client_id": started.client_id}

    return make
